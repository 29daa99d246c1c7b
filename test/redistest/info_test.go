package redistest

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestCommandStats(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	s := Start(t)
	c := s.Client(t)
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil { // connect before counting
		t.Fatal(err)
	}
	before := s.CommandStats(t)
	if got, err := c.Eval(ctx, "return 1", nil).Int(); err != nil || got != 1 {
		t.Fatalf("EVAL = %d, %v; want 1", got, err)
	}
	script := redis.NewScript("return 2")
	for range 2 { // EVALSHA, NOSCRIPT, EVAL; then EVALSHA
		if got, err := script.Run(ctx, c, nil).Int(); err != nil || got != 2 {
			t.Fatalf("script = %d, %v; want 2", got, err)
		}
	}
	after := s.CommandStats(t)
	for name, want := range map[string]int64{"eval": 2, "evalsha": 2, "info": 1, "ping": 0} {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s calls went up by %d, want %d (before %v, after %v)", name, got, want, before, after)
		}
	}
}

func TestTotalCommands(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	s := Start(t)
	c := s.Client(t)
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil { // connect before counting
		t.Fatal(err)
	}
	before := s.TotalCommands(t)
	for range 3 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Three PINGs and the INFO that read before.
	if got := s.TotalCommands(t) - before; got != 4 {
		t.Errorf("total_commands_processed went up by %d, want 4", got)
	}
}

func TestParseCommandStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    string
		want    map[string]int64
		wantErr string
	}{
		{
			name: "redis 7",
			info: "# Commandstats\r\n" +
				"cmdstat_evalsha:calls=3,usec=41,usec_per_call=13.67,rejected_calls=0,failed_calls=1\r\n" +
				"cmdstat_client|pause:calls=1,usec=24,usec_per_call=24.00,rejected_calls=0,failed_calls=0\r\n" +
				"cmdstat_PING:calls=12,usec=5\r\n",
			want: map[string]int64{"evalsha": 3, "client|pause": 1, "ping": 12},
		},
		{name: "empty", info: "# Commandstats\r\n", want: map[string]int64{}},
		{name: "other sections ignored", info: "# Stats\r\ntotal_commands_processed:9\r\n", want: map[string]int64{}},
		{name: "no calls", info: "cmdstat_get:usec=1\r\n", wantErr: "cmdstat_get: no calls= count"},
		{name: "bad calls", info: "cmdstat_get:calls=x\r\n", wantErr: "cmdstat_get: calls:"},
		{name: "negative calls", info: "cmdstat_get:calls=-1\r\n", wantErr: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCommandStats(tc.info)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseCommandStats checks that any reply parses without panicking
// into non-negative counts under lowercase names, and that formatting the
// result as INFO commandstats parses back to the same map.
func FuzzParseCommandStats(f *testing.F) {
	f.Add("# Commandstats\r\ncmdstat_eval:calls=2,usec=9,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n")
	f.Add("cmdstat_client|pause:calls=1\ncmdstat_x:calls=9223372036854775807\r\n")
	f.Add("cmdstat_:calls=1,calls=2\r\n:\r\n#\r\n")
	f.Fuzz(func(t *testing.T, info string) {
		stats, err := parseCommandStats(info)
		if err != nil {
			return
		}
		var b strings.Builder
		for name, calls := range stats {
			if calls < 0 || name != strings.ToLower(name) {
				t.Fatalf("parsed %q: %d", name, calls)
			}
			if strings.ContainsAny(name, ":\r\n") {
				continue // not a name Redis could print back
			}
			fmt.Fprintf(&b, "cmdstat_%s:calls=%d,usec=0\r\n", name, calls)
		}
		again, err := parseCommandStats(b.String())
		if err != nil {
			t.Fatalf("reparse %q: %v", b.String(), err)
		}
		maps.DeleteFunc(stats, func(name string, _ int64) bool { return strings.ContainsAny(name, ":\r\n") })
		if !maps.Equal(again, stats) {
			t.Fatalf("round trip: %v became %v", stats, again)
		}
	})
}
