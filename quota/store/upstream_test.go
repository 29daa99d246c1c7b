package store

import (
	"testing"
	"time"
)

// TestUpstreamMerge pins the one merge rule of the upstream's word: a
// clearly fresher observation's hold wins (one above the reserve lifts
// it), among observations of the same moment the latest end wins, a 429's
// hold is lifted by none but a later end, and a report carries it across
// clocks unchanged.
func TestUpstreamMerge(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var u UpstreamState
	u.Merge(at(0), 10*time.Second, time.Time{})
	if got := u.Report(at(2)); got.Age != 2*time.Second || got.Hold != 10*time.Second || got.ThrottleFor != 0 {
		t.Fatalf("after one observation: %+v", got)
	}
	u.Merge(at(-1), 0, time.Time{}) // older: changes nothing
	if !u.holdUntil.Equal(at(10)) {
		t.Errorf("an older observation lifted the hold: until %v", u.holdUntil)
	}
	u.Merge(at(0.5), 12*time.Second, time.Time{}) // the same moment, a longer hold: it ends later
	u.Merge(at(0.8), time.Second, time.Time{})    // the same moment, a shorter one: no change
	if !u.holdUntil.Equal(at(12.5)) || !u.observedAt.Equal(at(0.8)) {
		t.Errorf("simultaneous observations: hold until %v observed %v, want the latest end 12.5 s, observed 0.8 s", u.holdUntil, u.observedAt)
	}
	u.Merge(at(1.9), 0, at(30)) // clearly fresher and above the reserve, and a 429 for 28 s
	if !u.holdUntil.IsZero() || !u.throttleUntil.Equal(at(30)) {
		t.Errorf("fresher observation: hold until %v, throttle until %v", u.holdUntil, u.throttleUntil)
	}
	u.Merge(at(2), 0, at(20)) // an earlier 429 end lifts nothing
	if !u.throttleUntil.Equal(at(30)) {
		t.Errorf("an earlier 429 end shortened the throttle to %v", u.throttleUntil)
	}
	// Across clocks: a store whose clock reads 100 s later sees the same
	// durations.
	var store UpstreamState
	store.Apply(u.Report(at(5)), at(105))
	if !store.observedAt.Equal(at(102)) || !store.throttleUntil.Equal(at(130)) || !store.holdUntil.IsZero() {
		t.Errorf("in the store's clock: %+v", store)
	}
	store.Apply(nil, at(106))
	if !store.observedAt.Equal(at(102)) {
		t.Error("a nil report changed the state")
	}
}
