package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// planConfig is the defaults with the account of the worked example:
// 20,000 requests per minute, room for any in-flight bound, 30s grace.
func planConfig(edit func(*Config)) Config {
	cfg := defaultConfig()
	cfg.Account.RequestsPerMinute = 20000
	cfg.Account.MaxInFlight = 10000
	cfg.Server.ShutdownGrace = 30 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// planNumbers are the numbers of a planResult a test pins down.
type planNumbers struct {
	fleet       int64
	boundBy     string
	perProcess  int64
	transport   int
	maxReplicas int64
	chunk       int64
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		in    planInput
		want  planNumbers
		notes []string // each must appear in one of the notes
	}{
		{"worked example", planConfig(nil), planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, boundRequests, 27, 31, 10, 1012}, nil},
		{"per-process 10", planConfig(nil), planInput{ServiceTime: 800 * time.Millisecond, Replicas: 27},
			planNumbers{266, boundRequests, 10, 14, 27, 375}, nil},
		// 1,200,000 TPM at 2,000 tokens/request is 10 requests/s: 8 in flight.
		{"tokens bind", planConfig(func(c *Config) { c.Account.TokensPerMinute = 1_200_000 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 2, TokensPerRequest: 2000},
			planNumbers{8, boundTokens, 4, 8, 2, 150}, []string{"tokens bind", "10.00 requests/s", "266"}},
		{"tokens do not bind", planConfig(func(c *Config) { c.Account.TokensPerMinute = 1_200_000 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10, TokensPerRequest: 10},
			planNumbers{266, boundRequests, 27, 31, 10, 1012}, []string{"tokens do not bind", "1600 in flight"}},
		{"tokens without --tokens-per-request", planConfig(func(c *Config) { c.Account.TokensPerMinute = 1_200_000 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, boundRequests, 27, 31, 10, 1012}, []string{"--tokens-per-request is not given", "requests only"}},
		{"max_in_flight binds", planConfig(func(c *Config) { c.Account.MaxInFlight = 200 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{200, boundMaxInFlight, 20, 24, 10, 750}, []string{"account.max_in_flight (200) is tighter than the 266", "250.00 requests/s", "raise account.max_in_flight to 266"}},
		{"too many replicas", planConfig(nil), planInput{ServiceTime: 800 * time.Millisecond, Replicas: 20},
			planNumbers{266, boundRequests, 14, 18, 19, 525}, []string{"above 19 replicas a worker cannot obtain capacity"}},
		{"max_connections too low", planConfig(func(c *Config) { c.Upstream.MaxConnections = 5 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, boundRequests, 27, 31, 10, 1012}, []string{"upstream.max_connections (5) is below the per-process bound 27"}},
		{"max_connections set", planConfig(func(c *Config) { c.Upstream.MaxConnections = 64 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, boundRequests, 27, 64, 10, 1012}, nil},
		{"no grace", planConfig(func(c *Config) { c.Server.ShutdownGrace = 0 }),
			planInput{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, boundRequests, 27, 31, 10, 0}, []string{"server.shutdown_grace (0s) is too short"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.Source == "" {
				tt.in.Source = "--latency"
			}
			r, err := plan(tt.cfg, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got := planNumbers{r.FleetInFlight, r.BoundBy, r.PerProcessInFlight, r.TransportConnections, r.MaxReplicas, r.LargestChunk}
			if got != tt.want {
				t.Errorf("plan = %+v\n          want %+v", got, tt.want)
			}
			if r.Replicas != tt.in.Replicas || r.ServiceTimeSeconds != tt.in.ServiceTime.Seconds() {
				t.Errorf("replicas %d, service time %g s: want the input's", r.Replicas, r.ServiceTimeSeconds)
			}
			if len(tt.notes) == 0 && len(r.Notes) > 0 {
				t.Errorf("unexpected notes: %q", r.Notes)
			}
			all := strings.Join(r.Notes, "\n")
			for _, want := range tt.notes {
				if !strings.Contains(all, want) {
					t.Errorf("notes lack %q:\n%s", want, all)
				}
			}
		})
	}
}

func TestPlanRefusesNonsense(t *testing.T) {
	ok := planInput{ServiceTime: 800 * time.Millisecond, Source: "--latency", Replicas: 10}
	tests := []struct {
		name string
		edit func(*planInput)
		cfg  Config
		want []string // each must appear in the error
	}{
		{"zero latency", func(in *planInput) { in.ServiceTime = 0 }, planConfig(nil), []string{"plan: --latency", "must be > 0", "got 0s"}},
		{"negative latency", func(in *planInput) { in.ServiceTime = -time.Second }, planConfig(nil), []string{"plan: --latency", "got -1s"}},
		{"zero replicas", func(in *planInput) { in.Replicas = 0 }, planConfig(nil), []string{"plan: --replicas must be > 0, got 0"}},
		{"negative replicas", func(in *planInput) { in.Replicas = -3 }, planConfig(nil), []string{"plan: --replicas must be > 0, got -3"}},
		{"negative tokens", func(in *planInput) { in.TokensPerRequest = -1 }, planConfig(nil), []string{"plan: --tokens-per-request must be >= 0", "got -1"}},
		// 20,000 RPM at 1ms is 0.33 requests in flight.
		{"latency too short", func(in *planInput) { in.ServiceTime = time.Millisecond }, planConfig(nil),
			[]string{"plan: the fleet in-flight bound is 0", "fewer than one request in flight", "check --latency"}},
		{"tokens too few", func(in *planInput) { in.TokensPerRequest = 1_000_000 }, planConfig(func(c *Config) { c.Account.TokensPerMinute = 60_000 }),
			[]string{"the fleet in-flight bound is 0", "check --tokens-per-request and --latency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ok
			tt.edit(&in)
			_, err := plan(tt.cfg, in)
			if err == nil {
				t.Fatal("plan accepted it")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// runPlanCmd runs `meterproxy plan` on a config file with the worked
// example's account and returns stdout.
func runPlanCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path := writeConfig(t, "account: {requests_per_minute: 20000, max_in_flight: 1000}\nserver: {shutdown_grace: 30s}\n")
	var out, errOut bytes.Buffer
	err := run(t.Context(), append([]string{"plan", "--config", path}, args...), nil, &out, &errOut)
	if err != nil && errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

func TestRunPlanTable(t *testing.T) {
	out, err := runPlanCmd(t, "--latency", "800ms", "--replicas", "10")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fleet in flight        266", "set account.max_in_flight to this (now 1000)", "bound by requests",
		"per-process in flight  27", "the worker's concurrency",
		"transport connections  31", "upstream.max_connections: at least 27",
		"max replicas           10", "the HPA's maxReplicas",
		"largest chunk          1012", "the batch size",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestRunPlanJSON(t *testing.T) {
	out, err := runPlanCmd(t, "--latency", "800ms", "--replicas", "27", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	want := map[string]any{
		"fleet_in_flight": 266.0, "bound_by": "requests", "per_process_in_flight": 10.0, "transport_connections": 14.0,
		"max_replicas": 27.0, "largest_chunk": 375.0, "service_time_seconds": 0.8, "replicas": 27.0, "notes": []any{},
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || !jsonEqual(g, v) {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	if rps, _ := got["requests_per_second"].(float64); rps < 333.33 || rps > 333.34 {
		t.Errorf("requests_per_second = %v, want 333.33…", got["requests_per_second"])
	}
	if len(got) != 10 {
		t.Errorf("%d fields, want the 10 documented ones: %v", len(got), got)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// metricsText is /metrics with the upstream histogram of two classes:
// 60 requests taking 48s altogether, a mean of 800ms.
const metricsText = `# HELP meterproxy_upstream_duration_seconds Upstream service time, from admission to the end of the response, by class.
# TYPE meterproxy_upstream_duration_seconds histogram
meterproxy_upstream_duration_seconds_bucket{class="bulk",le="0.5"} 10
meterproxy_upstream_duration_seconds_bucket{class="bulk",le="1"} 40
meterproxy_upstream_duration_seconds_bucket{class="bulk",le="+Inf"} 40
meterproxy_upstream_duration_seconds_sum{class="bulk"} 36
meterproxy_upstream_duration_seconds_count{class="bulk"} 40
meterproxy_upstream_duration_seconds_bucket{class="interactive",le="0.5"} 10
meterproxy_upstream_duration_seconds_bucket{class="interactive",le="1"} 20
meterproxy_upstream_duration_seconds_bucket{class="interactive",le="+Inf"} 20
meterproxy_upstream_duration_seconds_sum{class="interactive"} 12
meterproxy_upstream_duration_seconds_count{class="interactive"} 20
# HELP meterproxy_upstream_429_total Responses in which the upstream itself answered 429.
# TYPE meterproxy_upstream_429_total counter
meterproxy_upstream_429_total 0
`

func serveMetrics(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRunPlanFrom(t *testing.T) {
	url := serveMetrics(t, metricsText)
	out, err := runPlanCmd(t, "--from", url, "--replicas", "10")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service time           800ms", "--from " + url + " (mean of 60 requests)",
		"fleet in flight        266", "per-process in flight  27", "largest chunk          1012"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestRunPlanRefuses(t *testing.T) {
	empty := serveMetrics(t, strings.NewReplacer("_count{class=\"bulk\"} 40", "_count{class=\"bulk\"} 0",
		"_count{class=\"interactive\"} 20", "_count{class=\"interactive\"} 0").Replace(metricsText))
	other := serveMetrics(t, "# TYPE up gauge\nup 1\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no latency", nil, "plan: --latency is required"},
		{"zero latency", []string{"--latency", "0s"}, "plan: --latency: the service time must be > 0"},
		{"both", []string{"--latency", "1s", "--from", empty}, "plan: give --latency or --from, not both"},
		{"zero replicas", []string{"--latency", "1s", "--replicas", "0"}, "plan: --replicas must be > 0, got 0"},
		{"negative tokens", []string{"--latency", "1s", "--tokens-per-request", "-5"}, "plan: --tokens-per-request must be >= 0"},
		{"no observations", []string{"--from", empty}, "has no observations (count 0)"},
		{"not meterproxy", []string{"--from", other}, "no histogram meterproxy_upstream_duration_seconds"},
		{"not found", []string{"--from", other + "/nothing/"}, "404 Not Found"},
		{"stray argument", []string{"--latency", "1s", "extra"}, `plan: unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runPlanCmd(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
