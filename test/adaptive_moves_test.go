//go:build load

package test

import (
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestAdaptiveBoundFollowsTheKnee: the knee moves mid-run. A server with 16
// slots at 200 ms (80 completions a second at most) loses three quarters
// of them, then gets them back, under 60 bulk workers and interactive at 2
// a second. Within 30 s of the drop the bound follows it down: ≤ 8 in
// service at the server on average, ≥ 17 completions a second of the 20
// left; within 30 s of the rise it climbs back: ≥ 60 a second of the 80
// (issue 24).
func TestAdaptiveBoundFollowsTheKnee(t *testing.T) {
	l := startAdaptiveLoad(t, loadShape{
		fake:        fakeprovider.Config{Latency: 200 * time.Millisecond, Slots: 16},
		bulkWorkers: 60,
		interactive: 500 * time.Millisecond,
		set:         func(c config) { c.set("account.adaptive_in_flight", true) },
	})
	l.run(30 * time.Second)
	before := l.measure(10 * time.Second)
	l.fake.SetSlots(4)
	l.run(30 * time.Second)
	down := l.measure(10 * time.Second)
	l.fake.SetSlots(16)
	l.run(30 * time.Second)
	up := l.measure(10 * time.Second)
	for _, c := range []struct {
		name string
		r    kneeRun
	}{{"16 slots", before}, {"4 slots, 30 s after the drop", down}, {"16 slots again, 30 s after the rise", up}} {
		t.Logf("%s: bound %.0f, %.1f completions/s, %.1f in service at the server, interactive p50 %v",
			c.name, c.r.bound, c.r.perSecond, c.r.inService, c.r.interactiveP50)
	}
	if down.inService > 8 || down.perSecond < 17 {
		t.Errorf("30 s after the drop to 4 slots: %.1f in service (want ≤ 8), %.1f completions a second (want ≥ 17 of 20)",
			down.inService, down.perSecond)
	}
	if up.perSecond < 60 {
		t.Errorf("30 s after the rise back to 16 slots: %.1f completions a second, want ≥ 60 of 80", up.perSecond)
	}
}
