//go:build load

package test

import (
	"context"
	"testing"
	"time"
)

// TestSlowClientsLeaveTheAdaptiveBound: the knee workload (a server of 8
// slots at 200 ms, 40 closed-loop bulk workers) under adaptive_in_flight,
// and 16 clients that never read arriving once the bound has settled.
// The bound measures the upstream's latency, not the clients' reading:
// good throughput during the stall is at least half of before, and
// within 20 s of their arrival the bound is at least three quarters of
// what it was. Before, the slow readers held slots until cut and the
// controller, seeing "latency per work rose", cut the bound 11 → 4 (issue
// 32 item 1).
func TestSlowClientsLeaveTheAdaptiveBound(t *testing.T) {
	p := slowReadersProxy(t, func(cfg config) {
		cfg.set("account.max_in_flight", 64)
		cfg.set("account.adaptive_in_flight", true)
	})
	ctx, cancel := context.WithCancel(t.Context())
	ok, wait := goodLoad(ctx, t, p.URL, importKey, 40)
	defer wait()
	defer cancel()
	bound := func() float64 {
		return sum(scrape(t, p.AdminURL), "meterproxy_in_flight_limit", map[string]string{"pool": "default"})
	}

	waitFor(t, "the good load under way", func() bool { return ok.Load() >= 40 })
	_ = rate(ok, 12*time.Second) // slow start ends and the bound settles at the knee
	before, settled := rate(ok, 3*time.Second), bound()
	arrived := time.Now()
	neverRead(t, p.URL, slowKey, 8, 8, 8_000_000)
	during := rate(ok, 4*time.Second)
	waitFor(t, "the bound at three quarters of what it was", func() bool { return bound() >= 0.75*settled })
	back := time.Since(arrived)
	t.Logf("good completions %.1f/s before, %.1f/s with 16 clients that never read; bound %.0f before, %.0f %.1f s after they came",
		before, during, settled, bound(), back.Seconds())
	if during < before/2 {
		t.Errorf("good throughput %.1f/s during the stall, want at least half of %.1f/s", during, before)
	}
	if back > 20*time.Second {
		t.Errorf("the bound came back to three quarters of %.0f only %.1f s after the slow readers came, want within 20 s", settled, back.Seconds())
	}
}
