package fakeprovider

import (
	"testing"
	"time"
)

// TestKnee: with Slots, each request's latency is stretched by the
// requests in service over the slots (at least 1); Busy sums the time in
// service, InService counts them; SetSlots moves the knee.
func TestKnee(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := New(Config{Slots: 2, Now: func() time.Time { return now }})
	var dones []func()
	for i, want := range []float64{1, 1, 1.5, 2} {
		slowdown, done := p.enterService(now)
		if slowdown != want {
			t.Errorf("request %d in service: slowdown %v, want %v", i+1, slowdown, want)
		}
		dones = append(dones, done)
	}
	now = now.Add(3 * time.Second)
	for _, done := range dones[:3] {
		done()
	}
	if st := p.Stats(); st.InService != 1 || st.Busy != 9*time.Second {
		t.Errorf("in service %d, busy %v; want 1 and 3 requests × 3 s", st.InService, st.Busy)
	}
	p.SetSlots(1)
	if slowdown, done := p.enterService(now); slowdown != 2 {
		t.Errorf("with one slot and one in service, slowdown %v, want 2", slowdown)
	} else {
		done()
	}
	p.SetSlots(0)
	if slowdown, done := p.enterService(now); slowdown != 1 {
		t.Errorf("without a knee, slowdown %v, want 1", slowdown)
	} else {
		done()
	}
	dones[3]()
	if st := p.Stats(); st.InService != 0 {
		t.Errorf("%d in service after every request ended", st.InService)
	}
}
