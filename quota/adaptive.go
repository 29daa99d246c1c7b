package quota

import (
	"math"
	"time"
)

// defaultMinInFlight is the floor of an adaptive bound when min_in_flight
// is not configured: below 4, one slow request is most of a sample and a
// step of one is a 50% move, so a gain cannot be told from noise.
const defaultMinInFlight = 4

// The controller's constants, each with the reason.
const (
	// latencyRise: latency per unit of work this far above its value at
	// the accepted bound, with no more work done, means the server lost
	// capacity. One heavy-tailed measurement can rise this far by
	// chance, so hold asks for two in a row.
	latencyRise = 1.3
	// holdMeasurements is how many measurements the bound holds after a
	// probe that failed before the next, so that most of the time is
	// spent at the accepted bound.
	holdMeasurements = 1
	// queueRise: latency per work this far above the least seen means
	// requests queue in the server at the accepted bound; only then is a
	// smaller bound worth trying.
	queueRise = 1.1
	// ewmaWeight is the weight of a new measurement in the accepted
	// bound's baseline.
	ewmaWeight = 0.5
)

// adaptiveState is one pool's controller, a plain value that round-trips
// through encoding/json so that a fleet can keep it in the store and step
// it from whichever replica holds the lease. The zero value has measured
// nothing; next starts it at the floor.
type adaptiveState struct {
	Bound    int           `json:"bound"`    // the bound in force
	Accepted int           `json:"accepted"` // the last bound judged good; Bound differs while growing or probing
	Phase    adaptivePhase `json:"phase"`
	Step     int           `json:"step"`   // the next probe's size
	Streak   int           `json:"streak"` // probes kept in a row in this direction
	Holds    int           `json:"holds"`  // measurements to hold before the next probe
	Base     adaptiveRate  `json:"base"`   // measured at Accepted (EWMA); zero until measured
	// Ref is the latency per work judged normal at the accepted bound
	// (EWMA), kept across a latency step down so that the next bound is
	// judged against it too; MinLatency is the least Base.Latency seen.
	Ref        float64         `json:"ref_latency_seconds_per_work"`
	MinLatency float64         `json:"min_latency_seconds_per_work"`
	Rises      int             `json:"rises"`    // measurements in a row with latency per work risen
	Since      time.Duration   `json:"since"`    // time since Bound last changed
	Cooldown   time.Duration   `json:"cooldown"` // time left without growth after a back-off
	Measure    adaptiveMeasure `json:"measure"`  // saturated intervals at Bound so far
}

// adaptiveLimits are the bounds an adaptive in-flight bound moves between:
// min_in_flight (0 takes defaultMinInFlight) and max_in_flight.
type adaptiveLimits struct {
	Floor   int
	Ceiling int
}

// clamp puts n between the floor and the ceiling.
func (l adaptiveLimits) clamp(n int) int {
	floor := l.Floor
	if floor <= 0 {
		floor = defaultMinInFlight
	}
	return max(min(n, l.Ceiling), min(floor, l.Ceiling), 1)
}

// initial is the state of a controller that has measured nothing: slow
// start from the floor. The zero adaptiveState stands for it too.
func (l adaptiveLimits) initial() adaptiveState {
	b := l.clamp(0)
	return adaptiveState{Phase: phaseGrow, Bound: b, Accepted: b, Step: max(1, b/8)}
}

// next feeds one interval's sample to the controller and returns its new
// state and what it decided. It is pure: the same state and sample always
// give the same answer.
func (l adaptiveLimits) next(s adaptiveState, m adaptiveSample) (adaptiveState, adaptiveDecision) {
	switch b := l.clamp(s.Bound); {
	case s.Phase == phaseStart:
		s = l.initial()
	case b != s.Bound || l.clamp(s.Accepted) != s.Accepted:
		// The floor or the ceiling moved (a reload): start over from the
		// nearest allowed bound.
		s = adaptiveState{Phase: phaseHold, Bound: b, Accepted: b, Step: max(1, b/8)}
	}
	d := adaptiveDecision{Action: actHold, From: s.Bound, To: s.Bound}
	if m.Bound != s.Bound || m.Elapsed <= 0 {
		d.Why = "sample for another bound"
		return s, d
	}
	s.Cooldown = max(0, s.Cooldown-m.Elapsed)
	since := s.Since
	s.Since += m.Elapsed
	if why := failing(m, s.Cooldown); why != "" {
		s = l.backOff(s)
		d.Action, d.To, d.Why = actBackOff, s.Bound, why
		return s, d
	}
	switch {
	case !m.Saturated:
		d.Why = "bound not binding"
		return s, d
	case since < m.meanLatency() || since == 0:
		// The first interval after a change, and any before the requests
		// admitted at it could complete, still measure the old bound.
		d.Why = "warming up"
		return s, d
	}
	s.Measure = s.Measure.add(m)
	if !s.Measure.ready() {
		d.Why = "measuring"
		return s, d
	}
	got := s.Measure.rate(s.Bound)
	s.Measure = adaptiveMeasure{}
	s, d.Action, d.Why = l.judge(s, got)
	d.To, d.Judged = s.Bound, got
	return s, d
}

// moveTo sets the bound in force and restarts measuring it.
func (s adaptiveState) moveTo(b int) adaptiveState {
	if b != s.Bound {
		s.Bound, s.Since = b, 0
	}
	s.Measure = adaptiveMeasure{}
	return s
}

// accept makes the bound in force the accepted one, measured as got. Ref
// moves only halfway to got: below the knee latency per work does not
// depend on the bound, and a single measurement that happened to be low
// would make the next ordinary one look like a rise.
func (s adaptiveState) accept(got adaptiveRate) adaptiveState {
	s.Accepted, s.Base, s.Rises = s.Bound, got, 0
	if s.Ref == 0 {
		s.Ref = got.Latency
	}
	s.Ref += ewmaWeight * (got.Latency - s.Ref)
	return s
}

// judge applies the phase's rule to a finished measurement.
func (l adaptiveLimits) judge(s adaptiveState, got adaptiveRate) (adaptiveState, adaptiveAction, string) {
	switch s.Phase {
	case phaseGrow:
		if s.Base.Work > 0 && !got.gained(s.Base) {
			return l.settle(s, got, "work stopped growing with the bound")
		}
		s = s.accept(got)
		if s.Cooldown > 0 || l.clamp(2*s.Bound) == s.Bound {
			return l.settle(s, got, "at the ceiling or cooling down")
		}
		return s.moveTo(l.clamp(2 * s.Bound)), actGrow, "work grew with the bound"
	case phaseUp:
		if got.gained(s.Base) {
			s = s.accept(got).kept()
			return l.probe(s, +1, "step up gained work")
		}
		if k := got.kneeBetween(s.Base); k > s.Accepted {
			return l.settle(s, got, "knee found within the step up")
		}
		if s.Streak == 0 && s.queued() {
			return l.probe(s, -1, "step up gained nothing; trying below")
		}
	case phaseDown:
		if got.relieved(s.Base) {
			work := max(s.Base.Work, got.Work) // each step down is judged against the most work seen
			s = s.accept(got).kept()
			s.Base.Work = work
			return l.probe(s, -1, "step down kept the work")
		}
	default:
		return l.hold(s, got)
	}
	return s.holdAt(s.Accepted), actRevert, "probe did not pay"
}

// settle ends growth: at the knee estimated between the accepted bound and
// the one just measured, or at the accepted bound.
func (l adaptiveLimits) settle(s adaptiveState, got adaptiveRate, why string) (adaptiveState, adaptiveAction, string) {
	if k := got.kneeBetween(s.Base); got.Bound > s.Accepted && k > s.Accepted {
		s.Accepted, s.Base, s.Ref = k, adaptiveRate{}, 0 // to be measured at k
	}
	return s.holdAt(s.Accepted), actSettle, why
}

// kept counts a probe kept in the phase's direction; two in a row double
// the step, so a knee that moved far is reached in a few probes.
func (s adaptiveState) kept() adaptiveState {
	s.Streak++
	if s.Streak >= 2 {
		s.Step *= 2
	}
	return s
}

// probe tries the next step from the accepted bound in direction dir, or
// holds when the floor, the ceiling or a cooldown forbids it.
func (l adaptiveLimits) probe(s adaptiveState, dir int, why string) (adaptiveState, adaptiveAction, string) {
	act, phase := actProbeUp, phaseUp
	if dir < 0 {
		act, phase = actProbeDown, phaseDown
	}
	b := l.clamp(s.Accepted + dir*s.Step)
	if b == s.Accepted || dir > 0 && s.Cooldown > 0 {
		return s.holdAt(s.Accepted), actHold, why
	}
	s = s.moveTo(b)
	s.Phase = phase
	return s, act, why
}

// hold judges a measurement at the accepted bound: it refreshes the
// baseline, steps down when latency per unit of work rose with no more
// work done in two measurements in a row (one heavy-tailed measurement
// can rise 30% by itself), and probes once the hold is over.
func (l adaptiveLimits) hold(s adaptiveState, got adaptiveRate) (adaptiveState, adaptiveAction, string) {
	if s.Base.Work == 0 || s.Base.Bound != got.Bound {
		s.Base = got
		if s.Ref == 0 {
			s.Ref = got.Latency
		}
	}
	if s.Ref > 0 && got.Latency >= latencyRise*s.Ref && got.Work <= s.Base.Work/keepShare {
		if s.Rises++; s.Rises < 2 {
			return s, actHold, "latency per work rose; confirming"
		}
		// Above the knee latency grows in proportion to the bound: the
		// bound that brings it back to Ref is the knee now.
		if to := l.clamp(int(math.Ceil(float64(s.Bound) * s.Ref / got.Latency))); to < s.Bound {
			s = s.holdAt(to)
			s.Base, s.Rises = adaptiveRate{}, 0
			return s, actLatencyRise, "latency per work rose with no more work"
		}
	}
	s.Rises = 0
	s.Base.Work += ewmaWeight * (got.Work - s.Base.Work)
	s.Base.Latency += ewmaWeight * (got.Latency - s.Base.Latency)
	s.Ref += ewmaWeight * (got.Latency - s.Ref)
	if s.MinLatency == 0 || s.Base.Latency < s.MinLatency {
		s.MinLatency = s.Base.Latency
	}
	if s.Holds > 0 {
		s.Holds--
		return s, actHold, "holding between probes"
	}
	if s.Cooldown > 0 || s.Accepted == l.clamp(s.Accepted+1) {
		if !s.queued() {
			s.Holds = holdMeasurements
			return s, actHold, "no growth allowed and no queueing"
		}
		return l.probe(s, -1, "probing below")
	}
	return l.probe(s, +1, "probing above")
}

// queued says latency per work at the accepted bound is above the least
// seen: requests queue inside the server, so a smaller bound may do the
// same work. Without it a probe below only costs throughput.
func (s adaptiveState) queued() bool {
	return s.MinLatency > 0 && s.Base.Latency >= queueRise*s.MinLatency
}

// holdAt makes b the accepted bound and holds there before probing again,
// with the step reset to an eighth of it.
func (s adaptiveState) holdAt(b int) adaptiveState {
	s = s.moveTo(b)
	s.Accepted, s.Phase, s.Holds, s.Streak = b, phaseHold, holdMeasurements, 0
	s.Step = max(1, b/8)
	return s
}
