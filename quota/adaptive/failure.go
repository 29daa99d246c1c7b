package adaptive

import (
	"math"
	"time"
)

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
