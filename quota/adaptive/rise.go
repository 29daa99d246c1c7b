package adaptive

import "math"

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
