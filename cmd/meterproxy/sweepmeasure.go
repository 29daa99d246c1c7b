package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// kneeShare is the knee rule: the knee is the smallest concurrency whose
// completions a minute reach this share of the best seen. Past a knee
// throughput is flat and only latency grows; 5% leaves room for the noise
// of a step's measurement, so a plateau's first level is found rather
// than whichever plateau level happened to measure highest.
const kneeShare = 0.95

// stepRule is how --step moves from one concurrency to the next: times
// factor (geometric), or plus add (additive).
type stepRule struct {
	factor float64
	add    int
}

// parseStep reads --step: +N adds N, anything else is a factor above 1.
func parseStep(s string) (stepRule, error) {
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 {
			return stepRule{}, fmt.Errorf("sweep: --step %q: +N wants a whole N ≥ 1", s)
		}
		return stepRule{add: n}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 1) || f > 100 {
		return stepRule{}, fmt.Errorf("sweep: --step %q: want a factor above 1 (1.5, 2) or +N to add N", s)
	}
	return stepRule{factor: f}, nil
}

// next is the level after c: at least c+1, so a small factor still moves.
func (r stepRule) next(c int) int {
	if r.add > 0 {
		return c + r.add
	}
	return max(c+1, int(math.Round(float64(c)*r.factor)))
}

// String is the rule as the header prints it.
func (r stepRule) String() string {
	if r.add > 0 {
		return fmt.Sprintf("+%d", r.add)
	}
	return "×" + strconv.FormatFloat(r.factor, 'f', -1, 64)
}

// sweepLevels are the concurrencies from start up to at most hi.
func sweepLevels(start, hi int, r stepRule) []int {
	var levels []int
	for c := start; c <= hi; c = r.next(c) {
		levels = append(levels, c)
	}
	return levels
}

// step is what one concurrency level measured.
type step struct {
	concurrency int
	// completionsPerMin and outputTokensPerSec are the work done inside
	// the step's window (see measure).
	completionsPerMin, outputTokensPerSec float64
	// p50 and p99 are nearest-rank percentiles of the latencies of the
	// requests sent inside the step's window and answered 2xx, mean their
	// mean.
	p50, p99, mean time.Duration
	// errors counts failures by kind: an HTTP status ("429", "500"),
	// kindTimeout or kindConnection.
	errors map[string]int
	// sent is the requests sent, answered or not; spent the usage of those
	// answered, estimated counts the answers that reported none.
	sent, answered, estimated int
	spent                     usage.Usage
	// detail is the first connection error's text.
	detail string
	// limits are the provider's rate limits its answers' headers reported.
	limits providerLimits
	// rateLimited and interrupted say the step was cut short: by a 429,
	// or by the operator. Such a step takes no part in the knee.
	rateLimited, interrupted bool
}

// complete reports whether the step ran its whole duration.
func (s step) complete() bool { return !s.rateLimited && !s.interrupted }

// measure summarises the outcomes of concurrency c's step, whose window
// ran from start to end; what was spent counts every outcome, the warm-up
// before start included. The workers stop sending at end and the requests
// then in flight are awaited, so each request's whole latency is known. A
// request counts as one completion spread evenly over its time in flight:
// it adds the share of that time that fell inside the window. A step of a
// few latencies long then measures c ÷ latency, where counting only the
// requests that ended inside the window would miss up to one per worker
// (at 32 workers and 800 ms, 1.5 s would count 32 and not 60).
func measure(c int, start, end time.Time, outs []outcome) step {
	s := step{concurrency: c, errors: map[string]int{}, limits: noLimits()}
	var work, tokens float64
	var lat []time.Duration
	var total time.Duration
	for _, o := range outs {
		s.sent++
		s.limits.observe(o.limits)
		switch o.kind {
		case kindOK:
		case kindCanceled:
			continue
		default:
			s.errors[o.kind]++
			if s.detail == "" {
				s.detail = o.detail
			}
			continue
		}
		s.answered++
		if o.usage.Estimated {
			s.estimated++
		}
		s.spent.Input += o.usage.Input
		s.spent.Output += o.usage.Output
		if !o.start.Before(start) && o.start.Before(end) {
			lat = append(lat, o.end.Sub(o.start))
			total += o.end.Sub(o.start)
		}
		f := inWindow(o, start, end)
		work += f
		tokens += f * float64(o.usage.Output)
	}
	if w := end.Sub(start); w > 0 {
		s.completionsPerMin = work / w.Minutes()
		s.outputTokensPerSec = tokens / w.Seconds()
	}
	slices.Sort(lat)
	s.p50, s.p99 = percentile(lat, 50), percentile(lat, 99)
	if len(lat) > 0 {
		s.mean = total / time.Duration(len(lat))
	}
	return s
}

// inWindow is the share of o's time in flight that fell between start and
// end: 1 for a request wholly inside. An instant request counts whole when
// it ended inside.
func inWindow(o outcome, start, end time.Time) float64 {
	d := o.end.Sub(o.start)
	if d <= 0 {
		if !o.end.Before(start) && !o.end.After(end) {
			return 1
		}
		return 0
	}
	from, to := o.start, o.end
	if from.Before(start) {
		from = start
	}
	if to.After(end) {
		to = end
	}
	if !to.After(from) {
		return 0
	}
	return float64(to.Sub(from)) / float64(d)
}

// percentile is the nearest-rank p-th percentile (1 ≤ p ≤ 100) of sorted:
// the smallest value that at least p% of the values do not exceed — a
// latency a request actually had, never an interpolation. 0 for none.
func percentile(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := (p*n + 99) / 100 // ceil(p% of n), in integers
	return sorted[min(max(rank, 1), n)-1]
}

// knee returns the index of the knee among steps (in rising concurrency):
// the first complete step whose completions a minute reach kneeShare of
// the best complete step's; best is that step's index. ok is false when no
// complete step completed anything.
func knee(steps []step) (at, best int, ok bool) {
	best = -1
	for i, s := range steps {
		if s.complete() && s.completionsPerMin > 0 && (best < 0 || s.completionsPerMin > steps[best].completionsPerMin) {
			best = i
		}
	}
	if best < 0 {
		return -1, -1, false
	}
	for i, s := range steps {
		if s.complete() && s.completionsPerMin >= kneeShare*steps[best].completionsPerMin {
			return i, best, true
		}
	}
	return best, best, true // unreachable: best itself qualifies
}
