package quota

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsExposition: the families admission registers, on its own
// registry, with a capped caller's bulk request in flight in the account
// (DefaultConfig, in process) and once it has ended and the store has
// heard of it, within the same one-second window.
func TestMetricsExposition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		callers := []classify.Caller{{Name: "capped", Class: classify.Bulk, MaxInFlight: 2, RequestsPerMinute: 120}}
		reg := prometheus.NewRegistry()
		a := runAdmitterOn(t, DefaultConfig(), callers, reg)
		lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk, Caller: "capped"})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		compareExposition(t, reg, "in flight", admissionExposition(1))
		lease.Release()
		time.Sleep(releaseDelay) // in the bubble: past the release flush, still in the window
		synctest.Wait()
		compareExposition(t, reg, "ended", admissionExposition(0))
		if n, err := testutil.GatherAndCount(reg, "meterproxy_store_call_duration_seconds"); err != nil || n != 2 {
			t.Errorf("meterproxy_store_call_duration_seconds: %d series (%v), want ok and error", n, err)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("promlint: %v %+v", err, problems)
		}
	})
}

// exposedFamilies are the families TestMetricsExposition compares in full;
// meterproxy_limit_tokens_per_second is absent without a token limit.
var exposedFamilies = []string{
	"meterproxy_queue_depth", "meterproxy_in_flight", "meterproxy_fleet_in_flight", "meterproxy_in_flight_limit",
	"meterproxy_window_used_requests", "meterproxy_window_used_tokens",
	"meterproxy_limit_requests_per_second", "meterproxy_limit_tokens_per_second", "meterproxy_upstream_hold_seconds",
	"meterproxy_store_degraded", "meterproxy_store_errors_total",
	"meterproxy_caller_queue_depth", "meterproxy_caller_cap_slots_used",
	"meterproxy_caller_in_flight_limit", "meterproxy_caller_limit_requests_per_second",
}

func compareExposition(t *testing.T, reg *prometheus.Registry, when, want string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), exposedFamilies...); err != nil {
		t.Errorf("%s: %v", when, err)
	}
}

// admissionExposition is TestMetricsExposition's exposition with bulk
// requests of the capped caller in flight: 10,000 requests a minute, bulk
// its 0.7 share, one bulk request granted in the window.
func admissionExposition(bulk int) string {
	return fmt.Sprintf(`
# HELP meterproxy_caller_cap_slots_used Slots taken under a capped caller's max_in_flight across the fleet, at the store's last answer, by caller. A request holds its slot from passing the cap until it ends, its wait in its pool included, so this can read above the caller's requests upstream (meterproxy_caller_in_flight). By mode, as meterproxy_caller_queue_depth.
# TYPE meterproxy_caller_cap_slots_used gauge
meterproxy_caller_cap_slots_used{caller="capped",mode="enforce"} %[1]d
# HELP meterproxy_caller_in_flight_limit A capped caller's callers[].max_in_flight (0: no in-flight cap), by caller.
# TYPE meterproxy_caller_in_flight_limit gauge
meterproxy_caller_in_flight_limit{caller="capped"} 2
# HELP meterproxy_caller_limit_requests_per_second A capped caller's callers[].requests_per_minute as requests a second (0: no rate cap), by caller.
# TYPE meterproxy_caller_limit_requests_per_second gauge
meterproxy_caller_limit_requests_per_second{caller="capped"} 2
# HELP meterproxy_caller_queue_depth Requests of a capped caller waiting on this replica, by caller and mode (shadow: shadow mode's simulated decisions).
# TYPE meterproxy_caller_queue_depth gauge
meterproxy_caller_queue_depth{caller="capped",mode="enforce"} 0
# HELP meterproxy_fleet_in_flight Requests in flight across the fleet, by account, pool and class: this replica's own now and the others' as they last told the store, slots taken ahead of demand (credits) left out; mode as meterproxy_queue_depth (this replica's).
# TYPE meterproxy_fleet_in_flight gauge
meterproxy_fleet_in_flight{account="default",class="bulk",mode="enforce",pool="default"} %[1]d
meterproxy_fleet_in_flight{account="default",class="interactive",mode="enforce",pool="default"} 0
# HELP meterproxy_in_flight Requests admitted by this replica and not yet finished, by account, pool, class and mode (as meterproxy_queue_depth).
# TYPE meterproxy_in_flight gauge
meterproxy_in_flight{account="default",class="bulk",mode="enforce",pool="default"} %[1]d
meterproxy_in_flight{account="default",class="interactive",mode="enforce",pool="default"} 0
# HELP meterproxy_in_flight_limit The in-flight bound admission works under now, by account and pool: the fleet's with Redis; this replica's own in process, and while Redis is bypassed under store.on_error local.
# TYPE meterproxy_in_flight_limit gauge
meterproxy_in_flight_limit{account="default",pool="default"} 200
# HELP meterproxy_limit_requests_per_second The most the class may take of the pool in a second, as configured and enforced (fleet-wide with Redis): the account's allowance for interactive; for bulk its share, or all but the interactive reserve while it may borrow.
# TYPE meterproxy_limit_requests_per_second gauge
meterproxy_limit_requests_per_second{account="default",class="bulk",pool="default"} 116.66666666666667
meterproxy_limit_requests_per_second{account="default",class="interactive",pool="default"} 166.66666666666666
# HELP meterproxy_queue_depth Requests waiting for admission, by account, pool, class and mode (shadow: mode shadow's simulated decisions, which no request waits for; enforce).
# TYPE meterproxy_queue_depth gauge
meterproxy_queue_depth{account="default",class="bulk",mode="enforce",pool="default"} 0
meterproxy_queue_depth{account="default",class="interactive",mode="enforce",pool="default"} 0
# HELP meterproxy_store_degraded 1 while the shared store (Redis) is bypassed after a failure and store.on_error applies, else 0.
# TYPE meterproxy_store_degraded gauge
meterproxy_store_degraded 0
# HELP meterproxy_store_errors_total Failed calls to the shared store (Redis), probes included.
# TYPE meterproxy_store_errors_total counter
meterproxy_store_errors_total 0
# HELP meterproxy_upstream_hold_seconds How much longer the pool's bulk is held on the upstream's word (remaining below the interactive reserve, or a 429) or by its output budget, as of the store's last answer.
# TYPE meterproxy_upstream_hold_seconds gauge
meterproxy_upstream_hold_seconds{account="default",pool="default"} 0
# HELP meterproxy_window_used_requests Requests the class was granted in the pool's current one-second window (fleet-wide with Redis), as of the store's last answer; mode as meterproxy_queue_depth.
# TYPE meterproxy_window_used_requests gauge
meterproxy_window_used_requests{account="default",class="bulk",mode="enforce",pool="default"} 1
meterproxy_window_used_requests{account="default",class="interactive",mode="enforce",pool="default"} 0
# HELP meterproxy_window_used_tokens Tokens the class was charged in the pool's current one-second window (fleet-wide with Redis), as of the store's last answer; mode as meterproxy_queue_depth.
# TYPE meterproxy_window_used_tokens gauge
meterproxy_window_used_tokens{account="default",class="bulk",mode="enforce",pool="default"} 0
meterproxy_window_used_tokens{account="default",class="interactive",mode="enforce",pool="default"} 0
`, bulk)
}
