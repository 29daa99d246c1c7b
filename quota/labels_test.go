package quota

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meterproxy/meterproxy/quota/store"
)

// TestPoolLabels: a pool's id splits into its account's label ("default"
// for the one account, the configured name with several) and its own
// ("default" for an account's own pool), never a joined name; /admin/state
// keeps its joined names; logs name the account only when there are
// several.
func TestPoolLabels(t *testing.T) {
	for _, tc := range []struct {
		account, pool string
		want          Labels
		state, log    string
	}{
		{"", "", Labels{"default", "default"}, "default", "pool=default"},
		{"", "gpt-4o", Labels{"default", "gpt-4o"}, "gpt-4o", "pool=gpt-4o"},
		{"chat-project", "", Labels{"chat-project", "default"}, "chat-project/default", "account=chat-project pool=default"},
		{"chat-project", "gpt-4o", Labels{"chat-project", "gpt-4o"}, "chat-project/gpt-4o", "account=chat-project pool=gpt-4o"},
	} {
		id := store.PoolID(tc.account, tc.pool)
		t.Run(id, func(t *testing.T) {
			if got := poolLabels(id); got != tc.want {
				t.Errorf("PoolLabels(%q) = %+v, want %+v", id, got, tc.want)
			}
			if got := LabelsOf(tc.account, tc.pool); got != tc.want {
				t.Errorf("LabelsOf(%q, %q) = %+v, want %+v", tc.account, tc.pool, got, tc.want)
			}
			if got := stateName(id); got != tc.state {
				t.Errorf("stateName(%q) = %q, want %q", id, got, tc.state)
			}
			var b strings.Builder
			slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: dropTimeAndLevel})).Info("m", poolLogAttrs(id)...)
			if got := strings.TrimSpace(strings.TrimPrefix(b.String(), "msg=m ")); got != tc.log {
				t.Errorf("log attrs of %q: %q, want %q", id, got, tc.log)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { _ = LabelsOf("chat-project", "gpt-4o") }); n != 0 {
		t.Errorf("LabelsOf allocates %v times, want none: the request path calls it", n)
	}
}

// dropTimeAndLevel leaves a text log line its message and attributes.
func dropTimeAndLevel(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
		return slog.Attr{}
	}
	return a
}

// TestMetricsAccountLabel: with several accounts every pool family is
// labelled by the account's configured name and the pool's own name.
func TestMetricsAccountLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := runAdmitterOn(t, twoAccounts(), nil, reg)
	want := `
# HELP meterproxy_in_flight_limit The in-flight bound admission works under now, by account and pool: the fleet's with Redis; this replica's own in process, and while Redis is bypassed under store.on_error local.
# TYPE meterproxy_in_flight_limit gauge
meterproxy_in_flight_limit{account="batch",pool="default"} 1
meterproxy_in_flight_limit{account="chat",pool="default"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meterproxy_in_flight_limit"); err != nil {
		t.Error(err)
	}
	got := map[Labels]bool{}
	for _, l := range a.Pools() {
		got[l] = true
	}
	if len(got) != 2 || !got[Labels{"chat", "default"}] || !got[Labels{"batch", "default"}] {
		t.Errorf("Pools() = %v, want chat/default and batch/default as labels", a.Pools())
	}
}
