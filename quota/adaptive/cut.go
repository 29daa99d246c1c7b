package adaptive

import (
	"math"
	"time"
)

// The bound comes down two ways, each a Limits rule beside those of
// controller.go: upstream failures back it off (failing, backOff), and a
// rise of latency per unit of work with no more work done cuts it to
// where the knee moved (rose, riseTo).

// How upstream failures move the adaptive bound.
const (
	// failShare: failures above 2% of attempts (at least failMin of them)
	// back the bound off; failMin keeps one in 40 from doing so.
	failShare = 0.02
	failMin   = 2
	// backOff is the multiplicative decrease on failures.
	backOff = 0.75
	// cooldown is how long the bound does not grow after a back-off; a 5xx
	// or timeout backs off at most once per cooldown, since a steady
	// stream of them may have nothing to do with load (a 429 backs off
	// every interval: the provider says so explicitly).
	cooldown = 10 * time.Second
)

// failing says why m calls for a back-off, or "" when it does not: 429s
// above failShare of attempts in any interval — the provider says so —
// and 5xx or timeouts, once the last back-off cooled down, above what
// chance gives at failShare (two Poisson deviations): at 80 attempts a
// steady 1.5% makes 2 in an interval now and then, which is no reason.
func failing(m Sample, left time.Duration) string {
	attempts := float64(m.Completed + m.Failures + m.Throttled)
	expect := failShare * attempts
	switch {
	case m.Throttled >= failMin && float64(m.Throttled) > expect:
		return "upstream 429s"
	case left == 0 && m.Failures >= failMin && float64(m.Failures) > expect+2*math.Sqrt(expect):
		return "upstream 5xx or timeouts"
	}
	return ""
}

// backOff cuts the bound by backOff, makes it the accepted bound, to be
// measured afresh, and stops growth for the cooldown.
func (l Limits) backOff(s State) State {
	s = s.holdAt(l.Clamp(int(float64(s.Bound) * backOff)))
	s.Base, s.Ref, s.RefDone, s.Rises, s.Cooldown = Rate{}, 0, 0, 0, cooldown
	return s
}

// rose judges got, at the bound in force, against Ref, the latency per
// unit of work normal at the accepted bound: the signal that the server
// changed, whatever the phase. A probe is judged by it first, so that a
// knee that drops while a step is measured is acted on by that step's
// judgement instead of being taken for a step that did not pay.
//
// It returns the bound the rise points to (0: no rise) and whether to
// act on it now: at once for a jump of latencyJump, else once a second
// measurement in a row confirms it.
func (l Limits) rose(s State, got Rate) (int, bool) {
	if s.Ref <= 0 || got.Latency <= 0 || s.Accepted <= 0 {
		return 0, false
	}
	// Above the knee latency per work grows in proportion to the bound, so
	// a step up is expected to raise it by its ratio; only more than that
	// says the server changed. With token counts, in both units: a shift
	// of the mix raises one alone (mix.go), and the bound is cut
	// only when the server does less work in every model of it.
	scale := max(1, float64(got.Bound)/float64(s.Accepted))
	rise := got.roseBy(s.Ref, s.RefDone) / scale
	if rise < latencyRise || s.Base.Work > 0 && got.above(s.Base, 1/keepShare) {
		return 0, false
	}
	// The bound that brings latency per work back to Ref is the knee now.
	to := l.Clamp(int(math.Ceil(float64(got.Bound) / (rise * scale))))
	if to >= s.Accepted {
		return 0, false
	}
	return to, rise >= latencyJump || s.Rises+1 >= 2
}

// riseTo makes to, the knee a rise of latency per work points to, the
// accepted bound, to be measured afresh against the same Ref.
func (l Limits) riseTo(s State, to int) (State, Action, string) {
	s = s.holdAt(to)
	s.Base, s.Rises, s.Peak = Rate{}, 0, 0 // what the server did before says nothing now
	return s, ActLatencyRise, "latency per work rose with no more work"
}
