package adaptive

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive/adaptivetest"
)

// simStep is one interval of a simulated run: the bound in force, the
// controller's answer, and the completions a second the model served.
type simStep struct {
	At       time.Duration // the interval's end
	Bound    int
	Accepted int
	Decision Decision
	Done     float64 // completions a second
	Used     float64 // the share of the server's capacity (Slots) used
}

// simulate runs the controller against the model for total in intervals
// of interval, calling at (if not nil) before each interval so a test can
// change the server mid-run.
func simulate(srv *adaptivetest.Server, lim Limits, st State, interval, total time.Duration, at func(now time.Duration)) []simStep {
	if st.Phase == PhaseStart {
		st = lim.initial()
	}
	var steps []simStep
	for srv.Now() < total {
		if at != nil {
			at(srv.Now())
		}
		used := srv.Used()
		m := Sample(srv.Run(st.Bound, interval))
		var d Decision
		st, d = lim.Next(st, m)
		steps = append(steps, simStep{At: srv.Now(), Bound: m.Bound, Accepted: st.Accepted, Decision: d,
			Done: float64(m.Completed) / interval.Seconds(), Used: (srv.Used() - used) / interval.Seconds() / float64(max(srv.Slots, 1))})
	}
	return steps
}

// during is the part of a run with from < At ≤ to.
func during(steps []simStep, from, to time.Duration) []simStep {
	var w []simStep
	for _, s := range steps {
		if s.At > from && s.At <= to {
			w = append(w, s)
		}
	}
	return w
}

// throughput is the mean completions a second over steps.
func throughput(steps []simStep) float64 {
	sum := 0.0
	for _, s := range steps {
		sum += s.Done
	}
	return sum / float64(max(len(steps), 1))
}

// boundRange is the least and greatest bound in force over steps.
func boundRange(steps []simStep) (lo, hi int) {
	lo = math.MaxInt
	for _, s := range steps {
		lo, hi = min(lo, s.Bound), max(hi, s.Bound)
	}
	return lo, hi
}

// summary prints a run every every, for a failing test's message and -v.
func summary(steps []simStep, every time.Duration) string {
	var b strings.Builder
	next := every
	for _, s := range steps {
		if s.At >= next || s.Decision.Action == ActBackOff || s.Decision.Action == ActLatencyRise {
			fmt.Fprintf(&b, "%5.0fs bound %3d accepted %3d %5.1f/s %s (%s)\n",
				s.At.Seconds(), s.Bound, s.Accepted, s.Done, s.Decision.Action, s.Decision.Why)
			for next <= s.At {
				next += every
			}
		}
	}
	return b.String()
}
