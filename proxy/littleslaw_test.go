package proxy

import (
	"math"
	"testing"
	"time"
)

// TestLittleMeter drives a known load — 40 requests a second, each in
// service for 250 ms, so 10 in flight — and reads it back.
func TestLittleMeter(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	now := base
	m := &littleMeter{now: func() time.Time { return now }}
	for i := range 40 * 15 { // 15 s of completions, 25 ms apart
		now = base.Add(time.Duration(i) * 25 * time.Millisecond)
		m.add(now, 250*time.Millisecond)
	}
	if got := m.value(); math.Abs(got-10) > 1 {
		t.Errorf("measured in flight %.2f, want 10 ± 10%%", got)
	}
	now = now.Add(11 * time.Second) // the load stopped
	if got := m.value(); got != 0 {
		t.Errorf("measured in flight %.2f after the load stopped, want 0", got)
	}
}

// TestLittleMeterMean: the mean service time over the window and the
// current second, for the drain's deadline; 0 before anything completed.
func TestLittleMeterMean(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := &littleMeter{now: func() time.Time { return now }}
	if got := m.mean(); got != 0 {
		t.Errorf("mean with nothing completed = %s, want 0", got)
	}
	m.add(now.Add(-3*time.Second), time.Second)
	m.add(now, 3*time.Second) // the current second counts too
	if got := m.mean(); got != 2*time.Second {
		t.Errorf("mean = %s, want 2s", got)
	}
	now = now.Add((littleWindow + 1) * time.Second)
	if got := m.mean(); got != 0 {
		t.Errorf("mean after the window passed = %s, want 0", got)
	}
}
