package quota

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// TestAdaptiveExposition: with adaptive_in_flight, three intervals of a
// saturated pool completing 20 a second at 200 ms each (the bubble's
// clock drives the 2 s ticks) take the bound from the floor, 4, to 8 — a
// first step that only sets the floor, one warming up, one judging and
// doubling — and the metrics, /admin/state and the log say so. Without
// adaptive_in_flight none of it is exported (TestMetricsExposition).
func TestAdaptiveExposition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		var logs runtest.Buffer
		a, err := New(adaptiveConfig(), Deps{Log: slog.New(slog.NewJSONHandler(&logs, nil)), Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		runtest.Start(t, a)
		l := a.pool(store.AccountPool)
		for range 3 {
			feed(l, adaptive.Sample{Completed: 40, Latency: 8 * time.Second, Saturated: true})
			time.Sleep(store.AdaptInterval) // the bubble's clock: one interval
			synctest.Wait()
		}
		want := `
# HELP meterproxy_adaptive_decisions_total Steps of the pool's adaptive in-flight bound this replica took (the fleet's steps are the sum over replicas), by action: grow, settle, probe_up, probe_down, revert, back_off, latency_rise, hold.
# TYPE meterproxy_adaptive_decisions_total counter
meterproxy_adaptive_decisions_total{account="default",action="back_off",pool="default"} 0
meterproxy_adaptive_decisions_total{account="default",action="grow",pool="default"} 1
meterproxy_adaptive_decisions_total{account="default",action="hold",pool="default"} 2
meterproxy_adaptive_decisions_total{account="default",action="latency_rise",pool="default"} 0
meterproxy_adaptive_decisions_total{account="default",action="probe_down",pool="default"} 0
meterproxy_adaptive_decisions_total{account="default",action="probe_up",pool="default"} 0
meterproxy_adaptive_decisions_total{account="default",action="revert",pool="default"} 0
meterproxy_adaptive_decisions_total{account="default",action="settle",pool="default"} 0
# HELP meterproxy_adaptive_latency_seconds_per_work Latency per unit of work (admission to end, over output tokens or completions) of the last measurement the pool's adaptive in-flight bound judged; only for pools with adaptive_in_flight.
# TYPE meterproxy_adaptive_latency_seconds_per_work gauge
meterproxy_adaptive_latency_seconds_per_work{account="default",pool="default"} 0.2
# HELP meterproxy_adaptive_work_per_second The work a second (output tokens, or completions where responses report none) of the last measurement the pool's adaptive in-flight bound judged, fleet-wide with Redis; only for pools with adaptive_in_flight.
# TYPE meterproxy_adaptive_work_per_second gauge
meterproxy_adaptive_work_per_second{account="default",pool="default"} 20
# HELP meterproxy_in_flight_limit The in-flight bound admission works under now, by account and pool: the fleet's with Redis; this replica's own in process, and while Redis is bypassed under store.on_error local.
# TYPE meterproxy_in_flight_limit gauge
meterproxy_in_flight_limit{account="default",pool="default"} 8
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meterproxy_adaptive_decisions_total",
			"meterproxy_adaptive_latency_seconds_per_work", "meterproxy_adaptive_work_per_second", "meterproxy_in_flight_limit"); err != nil {
			t.Error(err)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("promlint: %v %+v", err, problems)
		}
		got := a.State().Pools[DefaultPool].Adaptive
		wantState := adaptiveState{Bound: 8, Floor: 4, Ceiling: 200, Phase: string(adaptive.PhaseGrow), WorkPerSecond: 20, LatencySecondsPerWork: 0.2,
			LastDecision: adaptiveDecision{Action: "grow", From: 4, To: 8, Why: "work grew with the bound"}}
		if got == nil || *got != wantState {
			t.Errorf("/admin/state adaptive = %+v, want %+v", got, wantState)
		}
		if log := logs.String(); !strings.Contains(log, `"msg":"adaptive_bound_moved","pool":"default","action":"grow","from":4,"to":8,"why":"work grew with the bound"`) {
			t.Errorf("no adaptive_bound_moved log of 4 → 8 in:\n%s", log)
		}
	})
}

// TestAdaptiveNotExported: without adaptive_in_flight no adaptive family
// is exported and /admin/state has no adaptive entry.
func TestAdaptiveNotExported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		a := runAdmitterOn(t, DefaultConfig(), nil, reg)
		time.Sleep(2 * store.AdaptInterval)
		synctest.Wait()
		for _, name := range []string{"meterproxy_adaptive_decisions_total", "meterproxy_adaptive_latency_seconds_per_work", "meterproxy_adaptive_work_per_second"} {
			if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
				t.Errorf("%s: %d series (%v), want none", name, n, err)
			}
		}
		if st := a.State().Pools[DefaultPool].Adaptive; st != nil {
			t.Errorf("/admin/state adaptive = %+v, want none", st)
		}
	})
}
