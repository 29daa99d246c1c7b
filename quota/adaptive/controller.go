package adaptive

import "time"

// DefaultMinInFlight is the floor of an adaptive bound when min_in_flight
// is not configured: below 4, one slow request is most of a sample and a
// step of one is a 50% move, so a gain cannot be told from noise.
const DefaultMinInFlight = 4

// The controller's constants, each with the reason.
const (
	// latencyRise: latency per unit of work this far above its value at
	// the accepted bound, with no more work done, means the server lost
	// capacity. One heavy-tailed measurement can rise this far by
	// chance, so hold asks for two in a row.
	latencyRise = 1.3
	// latencyJump: a rise this large in one measurement is not chance —
	// the mean of 40 lognormal σ 1.5 latencies doubles now and then, it
	// does not triple — so it is acted on at once, during a probe too: a
	// knee that dropped to a quarter shows as four times the latency per
	// work, and confirming it would cost a measurement, 2–8 s on a real
	// server.
	latencyJump = 3.0
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
	// warmPart: an interval that starts this many tenths of a request's
	// latency after a change or later measures the new bound; its
	// completions' requests were admitted at it but for a few admitted
	// at most a tenth of a latency before. Below 1, or at 2 s a request
	// (and 2.02 s through the proxy) every step would wait two intervals
	// where one does.
	warmPart = 9
	// peakRise: work a second this far above Peak, the most the server
	// was known to do, says it may do more now. A 40-completion
	// measurement is ±16% (Poisson) by itself, so it is asked together
	// with flat latency per work on a second kept step up in a row.
	peakRise = 1.1
)

// State is one pool's controller, a plain value that round-trips
// through encoding/json so that a fleet can keep it in the store and step
// it from whichever replica holds the lease (the embedded parts' fields
// are flattened into one JSON object). The zero value has measured
// nothing; Next starts it at the floor.
type State struct {
	Bound    int `json:"bound"`    // the bound in force
	Accepted int `json:"accepted"` // the last bound judged good; Bound differs while growing or probing
	cycle
	memory
	Since    time.Duration `json:"since"`    // time since Bound last changed
	Cooldown time.Duration `json:"cooldown"` // time left without growth after a back-off
	Measure  measure       `json:"measure"`  // saturated intervals at Bound so far
}

// cycle is where the controller is in its cycle of growing,
// holding and probing.
type cycle struct {
	Phase  Phase `json:"phase"`
	Step   int   `json:"step"`   // the next probe's size
	Streak int   `json:"streak"` // probes kept in a row in this direction
	Holds  int   `json:"holds"`  // measurements to hold before the next probe
}

// memory is what the controller has seen the server do, the
// yardsticks a new measurement is judged by. A latency rise forgets Base
// and Peak (the server changed); a back-off forgets Base and Ref.
type memory struct {
	Base Rate `json:"base"` // measured at Accepted (EWMA); zero until measured
	// Ref is the latency per work judged normal at the accepted bound
	// (EWMA), kept across a latency step down so that the next bound is
	// judged against it too; MinLatency is the least Base.Latency seen.
	Ref        float64 `json:"ref_latency_seconds_per_work"`
	MinLatency float64 `json:"min_latency_seconds_per_work"`
	// RefDone and MinDone are Ref and MinLatency in latency per
	// completion, for measurements with token counts (mix.go).
	RefDone float64 `json:"ref_latency_seconds_per_completion,omitempty"`
	MinDone float64 `json:"min_latency_seconds_per_completion,omitempty"`
	// Peak is the most work a second measured at an accepted bound since
	// the knee last came down: what the server is known to do. Work well
	// above it says the server gained capacity.
	Peak  float64 `json:"peak_work_per_second"`
	Rises int     `json:"rises"` // measurements in a row with latency per work risen
}

// Limits are the bounds an adaptive in-flight bound moves between:
// min_in_flight (0 takes DefaultMinInFlight) and max_in_flight.
type Limits struct {
	Floor   int
	Ceiling int
	// Bulk is the class partition (classes.*): bulk, which fills the
	// bound and so probes it, holds only its part of it. The zero value
	// gives bulk the whole bound.
	Bulk BulkPart
}

// BulkPart is how much of an in-flight bound bulk may hold: its share,
// and with borrowing all but interactive's reserve (quota's grant.go, froom).
type BulkPart struct {
	Share, Reserve float64
	Borrow         bool
}

// bulk is what bulk may hold under bound b.
func (l Limits) bulk(b int) int {
	p := l.Bulk
	if p == (BulkPart{}) {
		return b
	}
	n := int(Part(int64(b), p.Share))
	if p.Borrow {
		n = max(n, b-int(Part(int64(b), p.Reserve)))
	}
	return n
}

// Clamp puts n between the floor and the ceiling.
func (l Limits) Clamp(n int) int {
	floor := l.Floor
	if floor <= 0 {
		floor = DefaultMinInFlight
	}
	return max(min(n, l.Ceiling), min(floor, l.Ceiling), 1)
}

// initial is the state of a controller that has measured nothing: slow
// start from the floor. The zero State stands for it too.
func (l Limits) initial() State {
	b := l.Clamp(0)
	return State{Bound: b, Accepted: b, cycle: cycle{Phase: PhaseGrow, Step: max(1, b/8)}}
}

// Next feeds one interval's sample to the controller and returns its new
// state and what it decided. It is pure: the same state and sample always
// give the same answer.
func (l Limits) Next(s State, m Sample) (State, Decision) {
	switch b := l.Clamp(s.Bound); {
	case s.Phase == PhaseStart:
		s = l.initial()
	case b != s.Bound || l.Clamp(s.Accepted) != s.Accepted:
		// The floor or the ceiling moved (a reload): start over from the
		// nearest allowed bound.
		s = State{Bound: b, Accepted: b, cycle: cycle{Phase: PhaseHold, Step: max(1, b/8)}}
	}
	d := Decision{Action: ActHold, From: s.Bound, To: s.Bound}
	if m.Bound != s.Bound || m.Elapsed <= 0 {
		d.Why = "sample for another bound"
		return s, d
	}
	s.Cooldown = max(0, s.Cooldown-m.Elapsed)
	since := s.Since
	s.Since += m.Elapsed
	if why := failing(m, s.Cooldown); why != "" {
		s = l.backOff(s)
		d.Action, d.To, d.Why = ActBackOff, s.Bound, why
		return s, d
	}
	switch {
	case !m.Saturated:
		d.Why = "bound not binding"
		return s, d
	case since < warmPart*max(m.meanLatency(), s.Base.took())/10 || since == 0:
		// The first interval after a change, and any before the requests
		// admitted at it could complete, still measure the old bound — as
		// long as a request took at the last measurement when none
		// completes in the interval (at 8 s a request most do not).
		d.Why = "warming up"
		return s, d
	}
	s.Measure = s.Measure.add(m)
	if !s.Measure.ready(s.Phase == PhaseGrow) {
		d.Why = "measuring"
		return s, d
	}
	got := s.Measure.rate(s.Bound)
	s.Measure = measure{}
	s, d.Action, d.Why = l.judge(s, got)
	d.To, d.Judged = s.Bound, got
	return s, d
}

// moveTo sets the bound in force and restarts measuring it.
func (s State) moveTo(b int) State {
	if b != s.Bound {
		s.Bound, s.Since = b, 0
	}
	s.Measure = measure{}
	return s
}

// accept makes the bound in force the accepted one, measured as got. Ref
// moves only halfway to got: below the knee latency per work does not
// depend on the bound, and a single measurement that happened to be low
// would make the next ordinary one look like a rise.
func (s State) accept(got Rate) State {
	s.Accepted, s.Base, s.Rises = s.Bound, got, 0
	s.Peak = max(s.Peak, got.Work)
	s.memory = s.towardRef(got)
	return s
}

// judge applies the phase's rule to a finished measurement.
func (l Limits) judge(s State, got Rate) (State, Action, string) {
	switch s.Phase {
	case PhaseGrow:
		if s.Base.Work > 0 && !got.gained(s.Base) {
			return l.settle(s, got, "work stopped growing with the bound")
		}
		if s.Ref > 0 && !got.flat(s.Ref) && !got.scaled(s.Base) {
			// Work grew, but less than the bound did, and latency per work
			// rose with it: the knee lies within the doubling, and growing
			// past it would only queue. (Work that grew with the bound is
			// no knee, whatever latency per work did: a server queueing
			// does not do more work per request in flight — there the
			// rise is noise, a busy proxy's own time.)
			return l.settle(s, got, "work grew but latency per work rose")
		}
		s = s.accept(got)
		if s.Cooldown > 0 || l.Clamp(2*s.Bound) == s.Bound {
			return l.settle(s, got, "at the ceiling or cooling down")
		}
		return s.moveTo(l.Clamp(2 * s.Bound)), ActGrow, "work grew with the bound"
	case PhaseUp, PhaseDown:
		if to, act := l.rose(s, got); act {
			return l.riseTo(s, to)
		} else if to > 0 {
			// A rise to confirm: back to the accepted bound, whose next
			// measurement confirms it or clears it.
			s.Rises++
			return s.holdAt(s.Accepted), ActRevert, "latency per work rose in the probe; confirming"
		}
	}
	switch s.Phase {
	case PhaseUp:
		if got.gained(s.Base) || got.belowKnee(s.Base, s.Ref) {
			faster := got.Work >= peakRise*s.Peak && got.flat(s.Ref)
			s = s.accept(got).kept()
			if s.Streak >= 2 && faster {
				// A second step up in a row gained work, beyond what the
				// server was known to do, and latency per work stayed at
				// the reference: the server gained capacity and the bound
				// is below its knee, and steps of one would take a minute
				// to climb what doubling climbs in seconds. Two in a row,
				// because without token counts latency per completion is
				// noisy enough to pass once.
				s.Phase = PhaseGrow
				if b := l.Clamp(2 * s.Bound); b != s.Bound && s.Cooldown == 0 {
					return s.moveTo(b), ActGrow, "step up gained work at the reference latency; slow start again"
				}
				s = s.holdAt(s.Accepted)
			}
			return l.probe(s, +1, "step up gained work")
		}
		if k := got.kneeBetween(s.Base); k > s.Accepted {
			return l.settle(s, got, "knee found within the step up")
		}
		if s.Streak == 0 && s.queued() {
			return l.probe(s, -1, "step up gained nothing; trying below")
		}
	case PhaseDown:
		if got.relieved(s.Base) {
			work, done := max(s.Base.Work, got.Work), max(s.Base.Done, got.Done) // each step down is judged against the most work seen
			s = s.accept(got).kept()
			s.Base.Work, s.Base.Done = work, done
			if !s.queued() {
				// Latency per work is back at the least seen: nothing
				// queues in the server, so the bound is at the knee, and
				// a step further down could only lose work — at a small
				// bound a quarter of it for a whole measurement.
				s = s.holdAt(s.Accepted)
				s.Holds = 0 // as settle's
				return s, ActSettle, "step down kept the work and ended the queue"
			}
			return l.probe(s, -1, "step down kept the work")
		}
	default:
		return l.hold(s, got)
	}
	return s.holdAt(s.Accepted), ActRevert, "probe did not pay"
}

// settle ends growth: at the knee estimated between the accepted bound and
// the one just measured, or at the accepted bound.
func (l Limits) settle(s State, got Rate, why string) (State, Action, string) {
	// Ref stays: latency per work is flat below the knee, so the accepted
	// bound's is k's too, and a server that slows before k is measured
	// must be judged against it rather than become the reference.
	if k := got.kneeBetween(s.Base); got.Bound > s.Accepted && k > s.Accepted {
		s.Accepted, s.Base = k, Rate{} // to be measured at k
	}
	s = s.holdAt(s.Accepted)
	// The measurement that judged the settle was the hold: the next,
	// at the settled bound, probes. A server that gained capacity at a
	// bound that fills its knee shows nothing until a probe above does
	// (TestAdaptiveStepChange's rise), and on a real server each
	// measurement held is 2–4 s of the 30 s to follow it in.
	s.Holds = 0
	return s, ActSettle, why
}

// kept counts a probe kept in the phase's direction; two in a row double
// the step, so a knee that moved far is reached in a few probes.
func (s State) kept() State {
	s.Streak++
	if s.Streak >= 2 {
		s.Step *= 2
	}
	return s
}

// probe tries the next step from the accepted bound in direction dir, or
// holds when the floor, the ceiling or a cooldown forbids it.
func (l Limits) probe(s State, dir int, why string) (State, Action, string) {
	act, phase := ActProbeUp, PhaseUp
	if dir < 0 {
		act, phase = ActProbeDown, PhaseDown
	}
	b := l.Clamp(s.Accepted + dir*s.Step)
	// A step that leaves bulk's share where it was cannot pay — at a
	// reserve of 0.3 bulk holds 5 at both 6 and 7 — and a bound stuck
	// below a server that regained capacity would never climb: step on
	// until bulk's share moves.
	for b != l.Clamp(b+dir) && l.bulk(b) == l.bulk(s.Accepted) {
		b = l.Clamp(b + dir)
	}
	if b == s.Accepted || l.bulk(b) == l.bulk(s.Accepted) || dir > 0 && s.Cooldown > 0 {
		return s.holdAt(s.Accepted), ActHold, why
	}
	s = s.moveTo(b)
	s.Phase = phase
	return s, act, why
}

// hold judges a measurement at the accepted bound: it refreshes the
// baseline, steps down when latency per unit of work rose with no more
// work done in two measurements in a row (one heavy-tailed measurement
// can rise 30% by itself) or jumped in one (see rose), and probes once
// the hold is over.
func (l Limits) hold(s State, got Rate) (State, Action, string) {
	fresh := s.Base.Work == 0 || s.Base.Bound != got.Bound
	if fresh {
		s.Base = got
		if s.Ref == 0 {
			s.Ref, s.RefDone = got.Latency, got.PerDone
		}
	}
	if to, act := l.rose(s, got); act {
		return l.riseTo(s, to)
	} else if to > 0 {
		s.Rises++
		return s, ActHold, "latency per work rose; confirming"
	}
	s.Rises = 0
	s.Base = s.Base.blend(got)
	s.memory = s.towardRef(got)
	s.Peak = max(s.Peak, s.Base.Work)
	s.memory = s.noteLeast()
	if fresh && s.queued() && s.Accepted != l.Clamp(s.Accepted-1) {
		// The first measurement of a bound a latency rise, a back-off or
		// a settle just chose, and requests still queue in the server:
		// those estimates round up, and a probe above cannot pay while
		// requests queue, so the next probe goes below, at once — a
		// probe on a real server takes a warm-up and a measurement,
		// 4–10 s of the 30 s a moved knee is to be followed in.
		return l.probe(s, -1, "queueing at the new bound; trying below")
	}
	if s.Holds > 0 {
		s.Holds--
		return s, ActHold, "holding between probes"
	}
	if s.Cooldown > 0 || s.Accepted == l.Clamp(s.Accepted+1) {
		if !s.queued() {
			s.Holds = holdMeasurements
			return s, ActHold, "no growth allowed and no queueing"
		}
		return l.probe(s, -1, "probing below")
	}
	return l.probe(s, +1, "probing above")
}

// queued says latency per work at the accepted bound is above the least
// seen — in completions too, with token counts (queuedMix): requests
// queue inside the server, so a smaller bound may do the same work.
// Without it a probe below only costs throughput.
func (s State) queued() bool {
	return s.MinLatency > 0 && s.Base.Latency >= queueRise*s.MinLatency && s.queuedMix()
}

// holdAt makes b the accepted bound and holds there before probing again,
// with the step reset to an eighth of it.
func (s State) holdAt(b int) State {
	s = s.moveTo(b)
	s.Accepted, s.Phase, s.Holds, s.Streak = b, PhaseHold, holdMeasurements, 0
	s.Step = max(1, b/8)
	return s
}
