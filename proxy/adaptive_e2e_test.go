package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestAdaptiveBoundFindsTheKnee is the in-process end to end run of the
// adaptive bound: a fake model server with a knee (8 slots at 200 ms: 40
// completions a second at most, more concurrency only queues inside it)
// behind the proxy with adaptive_in_flight and max_in_flight 200, driven by
// 60 bulk workers. Within 30 s the bound leaves the floor and settles
// near the knee: over the last 10 s the server does most of its plateau
// with few requests queued inside it, where a static bound of 200 would
// hold all 60 there. It is the one timing test of the adaptive bound,
// with generous margins; the exact figures are test/'s.
func TestAdaptiveBoundFindsTheKnee(t *testing.T) {
	const workers, run, measured = 60, 30 * time.Second, 10 * time.Second
	up := fakeprovider.New(fakeprovider.Config{Slots: 8, Latency: 200 * time.Millisecond, NoLog: true})
	// A configured caller: its key spends this account, so its answers
	// measure it (a key passed through for an unknown caller would not).
	p := newTestProxy(t, proxyOpts{upstream: up, environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(_ *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			q.Account.RequestsPerMinute = 600000
			q.Account.AdaptiveInFlight = true
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
	bound := func() float64 {
		return metricValue(t, p.reg, "meterproxy_in_flight_limit", map[string]string{"pool": quota.DefaultPool})
	}
	if b := bound(); b != 4 {
		t.Fatalf("the bound starts at %v, want the floor 4", b)
	}
	start := time.Now()
	stop := start.Add(run)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"llama","messages":[]}`)
				req.Header.Set("Authorization", "Bearer sk-import")
				if status, _, _ := do(t, req); status != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	<-time.After(time.Until(stop.Add(-measured)))
	before, at := up.Stats(), time.Now()
	var lo, hi float64 = 1e9, 0
	tick := time.NewTicker(500 * time.Millisecond)
	for time.Now().Before(stop.Add(-500 * time.Millisecond)) {
		<-tick.C
		b := bound()
		lo, hi = min(lo, b), max(hi, b)
	}
	tick.Stop()
	after, span := up.Stats(), time.Since(at)
	wg.Wait()
	rate := float64(after.Served-before.Served) / span.Seconds()
	inService := (after.Busy - before.Busy).Seconds() / span.Seconds()
	t.Logf("last %s: bound %v..%v, %.1f completions/s of 40, %.1f in service at the server on average; %d failed",
		measured, lo, hi, rate, inService, failed.Load())
	if lo < 6 || hi > 24 {
		t.Errorf("bound %v..%v over the last %s, want within [6, 24] (the knee is 8 slots; bulk holds 70%% of the bound)", lo, hi, measured)
	}
	if rate < 30 {
		t.Errorf("%.1f completions/s over the last %s, want ≥ 30 of the 40 plateau", rate, measured)
	}
	if inService > 20 {
		t.Errorf("%.1f in service at the server on average, want ≤ 20 (a static bound holds all %d workers there)", inService, workers)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed", n)
	}
}
