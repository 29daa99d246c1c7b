package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

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

// TestRunPlanPools: plan plans each account.models pool as an account of
// its own, in the table and under "pools" in the JSON.
func TestRunPlanPools(t *testing.T) {
	path := writeConfig(t, "account:\n  requests_per_minute: 20000\n  max_in_flight: 1000\n  models:\n"+
		"    - {name: mini, match: [gpt-4o-mini*], requests_per_minute: 6000, max_in_flight: 1000}\nserver: {shutdown_grace: 30s}\n")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"plan", "--config", path, "--latency", "800ms", "--replicas", "10"}, nil, &out, &errOut); err != nil {
		t.Fatalf("plan: %v\n%s", err, errOut.String())
	}
	// 6000/min = 100/s at 0.8 s is 80 in flight.
	for _, want := range []string{"fleet in flight        266", "pool mini", "fleet in flight        80"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(t.Context(), []string{"plan", "--config", path, "--latency", "800ms", "--json"}, nil, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var got struct {
		FleetInFlight int64 `json:"fleet_in_flight"`
		Pools         map[string]struct {
			FleetInFlight int64 `json:"fleet_in_flight"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.FleetInFlight != 266 || got.Pools["mini"].FleetInFlight != 80 {
		t.Fatalf("JSON %s: want the account's 266 and mini's 80", out.String())
	}
}
