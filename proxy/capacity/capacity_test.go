package capacity

import (
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
)

// withBase is in on the defaults with the account of the worked example
// (20,000 requests per minute, room for any in-flight bound, 30 s grace),
// edited by edit when not nil.
func withBase(edit func(*Input), in Input) Input {
	in.Account = quota.DefaultConfig().Account
	in.Account.RequestsPerMinute = 20000
	in.Account.MaxInFlight = 10000
	in.Upstream = proxy.DefaultUpstreamConfig()
	in.ShutdownGrace = 30 * time.Second
	if edit != nil {
		edit(&in)
	}
	return in
}

// planNumbers are the numbers of a Result a test pins down.
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
		cfg   func(*Input)
		in    Input
		want  planNumbers
		notes []string // each must appear in one of the notes
	}{
		{"worked example", nil, Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, BoundRequests, 27, 31, 10, 1012}, nil},
		{"per-process 10", nil, Input{ServiceTime: 800 * time.Millisecond, Replicas: 27},
			planNumbers{266, BoundRequests, 10, 14, 27, 375}, nil},
		// 1,200,000 TPM at 2,000 tokens/request is 10 requests/s: 8 in flight.
		{"tokens bind", func(c *Input) { c.Account.TokensPerMinute = 1_200_000 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 2, TokensPerRequest: 2000},
			planNumbers{8, BoundTokens, 4, 8, 2, 150}, []string{"tokens bind", "10.00 requests/s", "266"}},
		{"tokens do not bind", func(c *Input) { c.Account.TokensPerMinute = 1_200_000 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10, TokensPerRequest: 10},
			planNumbers{266, BoundRequests, 27, 31, 10, 1012}, []string{"tokens do not bind", "1600 in flight"}},
		{"tokens without --tokens-per-request", func(c *Input) { c.Account.TokensPerMinute = 1_200_000 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, BoundRequests, 27, 31, 10, 1012}, []string{"--tokens-per-request is not given", "requests only"}},
		{"max_in_flight binds", func(c *Input) { c.Account.MaxInFlight = 200 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{200, BoundMaxInFlight, 20, 24, 10, 750}, []string{"account.max_in_flight (200) is tighter than the 266", "250.00 requests/s", "raise account.max_in_flight to 266"}},
		{"too many replicas", nil, Input{ServiceTime: 800 * time.Millisecond, Replicas: 20},
			planNumbers{266, BoundRequests, 14, 18, 19, 525}, []string{"above 19 replicas a worker cannot obtain capacity"}},
		{"max_connections too low", func(c *Input) { c.Upstream.MaxConnections = 5 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, BoundRequests, 27, 31, 10, 1012}, []string{"upstream.max_connections (5) is below the per-process bound 27"}},
		{"max_connections set", func(c *Input) { c.Upstream.MaxConnections = 64 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, BoundRequests, 27, 64, 10, 1012}, nil},
		{"no grace", func(c *Input) { c.ShutdownGrace = 0 },
			Input{ServiceTime: 800 * time.Millisecond, Replicas: 10},
			planNumbers{266, BoundRequests, 27, 31, 10, 0}, []string{"server.shutdown_grace (0s) is too short"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.Source == "" {
				tt.in.Source = "--latency"
			}
			r, err := Plan(withBase(tt.cfg, tt.in))
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
	ok := Input{ServiceTime: 800 * time.Millisecond, Source: "--latency", Replicas: 10}
	tests := []struct {
		name string
		edit func(*Input)
		cfg  func(*Input)
		want []string // each must appear in the error
	}{
		{"zero latency", func(in *Input) { in.ServiceTime = 0 }, nil, []string{"plan: --latency", "must be > 0", "got 0s"}},
		{"negative latency", func(in *Input) { in.ServiceTime = -time.Second }, nil, []string{"plan: --latency", "got -1s"}},
		{"zero replicas", func(in *Input) { in.Replicas = 0 }, nil, []string{"plan: --replicas must be > 0, got 0"}},
		{"negative replicas", func(in *Input) { in.Replicas = -3 }, nil, []string{"plan: --replicas must be > 0, got -3"}},
		{"negative tokens", func(in *Input) { in.TokensPerRequest = -1 }, nil, []string{"plan: --tokens-per-request must be >= 0", "got -1"}},
		// 20,000 RPM at 1ms is 0.33 requests in flight.
		{"latency too short", func(in *Input) { in.ServiceTime = time.Millisecond }, nil,
			[]string{"plan: the fleet in-flight bound is 0", "fewer than one request in flight", "check --latency"}},
		{"tokens too few", func(in *Input) { in.TokensPerRequest = 1_000_000 }, func(c *Input) { c.Account.TokensPerMinute = 60_000 },
			[]string{"the fleet in-flight bound is 0", "check --tokens-per-request and --latency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ok
			tt.edit(&in)
			_, err := Plan(withBase(tt.cfg, in))
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
