package test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// kneeRun is what one run against a server with a knee measured over its
// last measureFor: completions a second at the server, the mean number in
// service there (Little's law on Stats.Busy), and the interactive
// requests' latency.
type kneeRun struct {
	perSecond, inService float64
	interactiveP50       time.Duration
	bound                float64 // meterproxy_in_flight_limit at the end
}

// runKnee puts a proxy configured by set in front of a fake server with
// slots slots at 200 ms, and runs bulk workers (closed loop) beside
// interactive requests at 2 a second for warm, then measures for
// measureFor.
func runKnee(t *testing.T, slots, bulkWorkers int, warm, measureFor time.Duration, set func(config)) kneeRun {
	t.Helper()
	fake := fakeprovider.New(fakeprovider.Config{Latency: 200 * time.Millisecond, Slots: slots, NoLog: true})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.withCallers()
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("account.max_in_flight", 200)
	cfg.set("classes.bulk.max_wait", "60s")
	set(cfg)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, bulkWorkers+16)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for range bulkWorkers {
		wg.Go(func() {
			for ctx.Err() == nil {
				fairSend(ctx, client, p.URL, importKey)
			}
		})
	}
	var mu sync.Mutex
	var interactive []time.Duration
	measuring := make(chan struct{})
	tickUntil(ctx, &wg, 500*time.Millisecond, func() {
		status, took := fairSend(ctx, client, p.URL, chatKey)
		select {
		case <-measuring:
			if status == 200 {
				mu.Lock()
				interactive = append(interactive, took)
				mu.Unlock()
			}
		default:
		}
	})
	<-time.After(warm) // the load's length, not a synchronisation
	before, start := fake.Stats(), time.Now()
	close(measuring)
	<-time.After(measureFor)
	after, elapsed := fake.Stats(), time.Since(start)
	bound := sum(scrape(t, p.AdminURL), "meterproxy_in_flight_limit", map[string]string{"pool": "default"})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(interactive)
	var p50 time.Duration
	if len(interactive) > 0 {
		p50 = interactive[len(interactive)/2]
	}
	return kneeRun{
		perSecond:      float64(after.Served-before.Served) / elapsed.Seconds(),
		inService:      (after.Busy - before.Busy).Seconds() / elapsed.Seconds(),
		interactiveP50: p50,
		bound:          bound,
	}
}

// TestAdaptiveBoundFindsTheKnee: a server with 8 slots at 200 ms (40
// completions a second at most), 60 bulk workers and interactive at 2 a
// second. With adaptive_in_flight the bound finds the knee within 25 s:
// ≥ 34 completions a second, ≤ 16 in service at the server on average,
// interactive p50 ≤ 500 ms. A static bound of 200 beside it gets the same
// completions but queues everything inside the server (issue 24).
func TestAdaptiveBoundFindsTheKnee(t *testing.T) {
	if testing.Short() {
		t.Skip("a 35 s load run per bound; skipped with -short")
	}
	var adaptive, static kneeRun
	var wg sync.WaitGroup
	wg.Go(func() {
		adaptive = runKnee(t, 8, 60, 25*time.Second, 10*time.Second, func(c config) { c.set("account.adaptive_in_flight", true) })
	})
	wg.Go(func() { static = runKnee(t, 8, 60, 25*time.Second, 10*time.Second, func(config) {}) })
	wg.Wait()
	t.Logf("adaptive: bound %.0f, %.1f completions/s, %.1f in service at the server, interactive p50 %v",
		adaptive.bound, adaptive.perSecond, adaptive.inService, adaptive.interactiveP50)
	t.Logf("static 200: %.1f completions/s, %.1f in service at the server, interactive p50 %v",
		static.perSecond, static.inService, static.interactiveP50)
	if adaptive.perSecond < 34 {
		t.Errorf("adaptive: %.1f completions a second, want ≥ 34 of the 40 the server can do", adaptive.perSecond)
	}
	if adaptive.inService > 16 {
		t.Errorf("adaptive: %.1f in service at the server on average, want ≤ 16 (8 slots)", adaptive.inService)
	}
	if adaptive.interactiveP50 == 0 || adaptive.interactiveP50 > 500*time.Millisecond {
		t.Errorf("adaptive: interactive p50 %v, want ≤ 500 ms", adaptive.interactiveP50)
	}
}
