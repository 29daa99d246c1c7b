package store

import "time"

// UpstreamState is what is known of the upstream's word on the account,
// in one clock: the freshest observation's time and the hold it announced
// (remaining below the reserve), and the end of the latest 429's retry
// hint. The replica keeps one of what it saw since its last store call, a
// store one of everything it heard, in its own clock. merge is the one
// rule; take.lua's upstream phase mirrors it, and the conformance suite
// holds the two equal. The zero value knows nothing.
type UpstreamState struct {
	observedAt, holdUntil, throttleUntil time.Time
}

// simultaneous is how close two observations are to describe the same
// moment of the provider's bucket. Responses to requests sent together
// (a batch of grants, several replicas) come back in any order, and the
// one the provider debited last — the lowest remaining, the longest hold —
// need not be the last to arrive; so among them the latest end of a hold
// wins, while a clearly fresher word (more than this later) replaces it.
const simultaneous = time.Second

// Merge adds an observation made at at that holds bulk for hold after it
// (0: the account is above the reserve, which lifts an older hold) and,
// by a 429, until throttleUntil (zero: none). An observation clearly
// fresher than the freshest so far replaces its hold; one made at the same
// moment (within simultaneous) can only make it end later; a clearly older
// one changes nothing. A 429's hold is lifted by none but a later end.
func (u *UpstreamState) Merge(at time.Time, hold time.Duration, throttleUntil time.Time) {
	var until time.Time
	if hold > 0 {
		until = at.Add(hold)
	}
	switch {
	case at.After(u.observedAt.Add(simultaneous)):
		u.observedAt, u.holdUntil = at, until
	case !at.Before(u.observedAt.Add(-simultaneous)):
		if at.After(u.observedAt) {
			u.observedAt = at
		}
		if until.After(u.holdUntil) {
			u.holdUntil = until
		}
	}
	if throttleUntil.After(u.throttleUntil) {
		u.throttleUntil = throttleUntil
	}
}

// Holds reports whether u holds bulk at now: an announced hold or a
// 429's has not ended.
func (u *UpstreamState) Holds(now time.Time) bool {
	return u.holdUntil.After(now) || u.throttleUntil.After(now)
}

// Report is u as a report sent at now, in durations relative to it, so
// the store reads it on its own clock.
func (u *UpstreamState) Report(now time.Time) *UpstreamReport {
	r := &UpstreamReport{Age: max(0, now.Sub(u.observedAt)), ThrottleFor: max(0, u.throttleUntil.Sub(now))}
	if !u.holdUntil.IsZero() {
		r.Hold = u.holdUntil.Sub(u.observedAt)
	}
	return r
}

// Apply merges a report received at now; a nil report changes nothing.
func (u *UpstreamState) Apply(r *UpstreamReport, now time.Time) {
	if r == nil {
		return
	}
	var throttleUntil time.Time
	if r.ThrottleFor > 0 {
		throttleUntil = now.Add(r.ThrottleFor)
	}
	u.Merge(now.Add(-r.Age), r.Hold, throttleUntil)
}

// hold is how much longer bulk is held at now.
func (u *UpstreamState) hold(now time.Time) time.Duration {
	until := u.holdUntil
	if u.throttleUntil.After(until) {
		until = u.throttleUntil
	}
	return max(0, until.Sub(now))
}
