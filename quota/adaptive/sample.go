package adaptive

import "time"

// Sample is one interval's measurement of a pool, fleet-wide or
// one replica's, fed to Limits.Next. The caller fills it from what
// its leases saw; the controller reads no clock.
type Sample struct {
	// Bound is the in-flight bound that was in force for the interval. A
	// sample taken under another bound than the controller's (a replica
	// reporting late) is not judged.
	Bound int
	// Saturated says the bound was binding for most of the interval:
	// requests waited on it, or the peak in flight reached it. False when
	// demand, a rate window or a provider hold limited the pool; such an
	// interval says nothing about the bound and the controller holds.
	Saturated bool
	// Completed counts requests answered 2xx in the interval; may be 0.
	Completed int
	// Work is the output tokens those requests reported; 0 when responses
	// report none, and then each completion counts as one unit of work.
	Work float64
	// Elapsed is the interval's length; must be > 0 to be judged.
	Elapsed time.Duration
	// Latency is the sum of the completed requests' latencies, admission to
	// end; 0 when Completed is.
	Latency time.Duration
	// Busy is the time requests were in flight in the interval, summed
	// over them, whatever became of them: Busy/Elapsed is the mean number
	// in flight. 0 when not measured.
	Busy time.Duration
	// Failures counts upstream 5xx answers and timeouts; may be 0.
	Failures int
	// Throttled counts upstream 429s; may be 0.
	Throttled int
}

// meanLatency is the interval's mean latency per completed request, 0
// without completions.
func (m Sample) meanLatency() time.Duration {
	if m.Completed == 0 {
		return 0
	}
	return m.Latency / time.Duration(m.Completed)
}

// The thresholds of a step's judgement.
const (
	// gainShare: a step up is worth keeping when work a second rose by at
	// least half the step's proportional gain (a knee halfway through the
	// step still passes; a flat plateau with noise does not).
	gainShare = 0.5
	// keepShare: a step down is kept when work a second stayed at 97% of
	// the bound above it — the smallest bound that gives nearly all of it.
	keepShare = 0.97
)

// measure accumulates saturated intervals at one bound until they
// hold enough completions to be judged: one 2 s interval of 80 completions
// is ±11% (Poisson), and with heavy-tailed outputs worse, while a probe one
// step up expects only a few percent.
type measure struct {
	Completed int           `json:"completed"`
	Work      float64       `json:"work"`
	Elapsed   time.Duration `json:"elapsed"`
	Latency   time.Duration `json:"latency"`
	Busy      time.Duration `json:"busy,omitempty"`
}

// Measurement sizes: a measurement is judged at minMeasureCompletions, or
// once it spans maxMeasureTime with at least minTimedCompletions — a server
// at 2 s a request and a bound of 4 completes 2 a second, and the bound must
// still grow in seconds, not minutes. While the bound grows it is judged at
// minGrowCompletions: a doubling expects twice the work, which a
// measurement of a few completions cannot hide, and with its time in
// flight (rate) a measurement of one wave of completions is as good as of
// several — at 8 s a request and a bound of 4, ten completions take half
// a minute.
const (
	minMeasureCompletions = 40
	maxMeasureTime        = 10 * time.Second
	minTimedCompletions   = 10
	minGrowCompletions    = 4
)

// add folds one saturated interval in.
func (a measure) add(m Sample) measure {
	a.Completed += m.Completed
	a.Work += m.Work
	a.Elapsed += m.Elapsed
	a.Latency += m.Latency
	a.Busy += m.Busy
	return a
}

// ready says the measurement holds enough to be judged; growing, enough
// to judge a doubling.
func (a measure) ready(growing bool) bool {
	return a.Completed >= minMeasureCompletions ||
		(a.Elapsed >= maxMeasureTime && a.Completed >= minTimedCompletions) ||
		(growing && a.Completed >= minGrowCompletions)
}

// rate is what the measurement says about bound: work a second and
// latency per unit of work, in output tokens where it has them and in
// completions.
//
// Work a second is the mean number in flight over latency per work
// (Little's law) where the measurement has its busy time: completions
// come in bursts — closed-loop callers of a server whose latency is about
// the same for every request send and are answered in waves, one a
// latency apart — and a measurement of a few seconds counts one wave
// more or less by chance, while the time in flight and each completion's
// latency are the same whenever it starts. Without it, the completions
// and tokens counted over the measurement.
func (a measure) rate(bound int) Rate {
	done := float64(a.Completed)
	work := a.Work
	if work == 0 {
		work = done
	}
	r := Rate{Bound: bound, Tokens: a.Work > 0}
	if done > 0 {
		r.Latency, r.PerDone = a.Latency.Seconds()/work, a.Latency.Seconds()/done
	}
	switch {
	case a.Elapsed <= 0:
	case a.Busy > 0 && a.Latency > 0:
		inFlight := a.Busy.Seconds() / a.Elapsed.Seconds()
		r.Work, r.Done = inFlight/r.Latency, inFlight/r.PerDone
	default:
		r.Work, r.Done = work/a.Elapsed.Seconds(), done/a.Elapsed.Seconds()
	}
	return r
}

// Rate is a judged measurement at one bound: the controller's view,
// shown in metrics and /admin/state.
//
// Work a second (output tokens, else completions) is the signal because it
// counts what the server did, whatever the request mix: LLM latency is
// heavy-tailed and grows with output length, so a mix of longer outputs
// raises latency with no queueing at all, and a latency gradient (Gradient2,
// Vegas, Envoy's minRTT) reads that as overload. Work a second grows with
// the bound below the knee and stays flat above it, for any mix. Latency
// per unit of work is the secondary signal: a longer mix leaves it alone,
// while above the knee it grows in proportion to the bound.
type Rate struct {
	Bound   int     `json:"bound"`
	Work    float64 `json:"work_per_second"`
	Latency float64 `json:"latency_seconds_per_work"`
	// Tokens says work is output tokens: latency per token is then precise
	// (within a percent over 40 completions, whatever the mix), while
	// latency per completion is as noisy as the mix.
	Tokens bool `json:"tokens,omitempty"`
	// Done and PerDone are the same measurement in completions:
	// completions a second and latency per completion (Work and Latency
	// themselves without tokens). See mix.go for why both.
	Done    float64 `json:"completions_per_second,omitempty"`
	PerDone float64 `json:"latency_seconds_per_completion,omitempty"`
}

// took is the mean latency of a completion the rate measured; 0 when
// unmeasured.
func (r Rate) took() time.Duration {
	return time.Duration(r.PerDone * float64(time.Second))
}

// gained says the step up from base to r paid: work a second rose by at
// least half the step's proportional gain, and latency per unit of work
// rose by less than that. Work a second is robust to the mix but noisy
// (one long generation more or less in a window moves it); latency per
// work is precise (a long generation adds to both its sums) and, above the
// knee, rises with the bound. Asking both to agree keeps a noisy window
// from walking the bound up a plateau.
func (r Rate) gained(base Rate) bool {
	want := 1 + gainShare*(float64(r.Bound)/float64(base.Bound)-1)
	return r.Work >= base.Work*want && (base.Latency == 0 || r.Latency < base.Latency*want)
}

// scaleShare: a step up whose work grew by this share of the bound's
// proportional growth or more grew with the bound — below the knee every
// request in flight adds its work; a knee inside the step gives at most
// the part of it below the knee. Below 1 for the noise of a measurement
// and the interactive reserve's rounding of bulk's part.
const scaleShare = 0.8

// scaled says work grew with the bound from base to r (scaleShare of
// proportionally, or more).
func (r Rate) scaled(base Rate) bool {
	if base.Work <= 0 || base.Bound <= 0 || r.Bound <= base.Bound {
		return false
	}
	return r.Work >= base.Work*(1+scaleShare*(float64(r.Bound)/float64(base.Bound)-1))
}

// relieved says the step down from base to r paid: work a second stayed at
// keepShare of base's, and latency per work fell by at least half the
// step's proportional fall — requests had been queueing in the server.
// At or below the knee latency per work stays put and the step is refused
// however the noise falls. With token counts both hold in completions too
// (mixRelieved): callers of short answers leaving mid-step lower latency
// per token alone.
func (r Rate) relieved(base Rate) bool {
	want := 1 - gainShare*(1-float64(r.Bound)/float64(base.Bound))
	return r.Work >= keepShare*base.Work && (base.Latency == 0 || r.Latency <= base.Latency*want) && r.mixRelieved(base, want)
}

// kneeBetween estimates the knee when r, at a larger bound than base, did
// not gain as gained asks. With work a second c·min(L, K), a knee K between
// the two bounds gives r.Work/base.Work = K/base.Bound; with latency per
// work flat below K and growing as L/K above it, r.Latency/base.Latency =
// r.Bound/K. It takes the smaller of the two estimates, base.Bound when
// neither places the knee above it.
func (r Rate) kneeBetween(base Rate) int {
	if base.Work <= 0 || r.Work <= base.Work {
		return base.Bound
	}
	k := float64(base.Bound) * r.Work / base.Work
	if base.Latency > 0 && r.Latency > base.Latency {
		k = min(k, float64(r.Bound)*base.Latency/r.Latency)
	}
	return min(max(int(k+0.5), base.Bound), r.Bound-1)
}

// flatShare: latency per work within this share of the reference counts as
// flat. Below the knee it does not move with the bound (with token counts
// a 40-completion measurement holds it within a percent); a step up into
// the plateau raises it by the step's ratio, 1/8 for the usual step.
const flatShare = 1.04

// flat says r's latency per work is at the reference ref: the bound r was
// measured at is below the knee.
func (r Rate) flat(ref float64) bool {
	return ref > 0 && r.Latency <= ref*flatShare
}

// belowKnee says a step up from base to r stayed below the knee by latency
// per token alone: it rose by less than a quarter of the step's ratio over
// the reference, where above the knee it rises by all of it. Work a second
// is the noisier signal — one long generation finishing inside a window or
// not moves it by more than a step of one adds at a small bound — so with
// token counts this keeps a step up that gained says nothing about.
// Without them latency per completion is as noisy as work, and only
// gained judges.
func (r Rate) belowKnee(base Rate, ref float64) bool {
	if !r.Tokens || ref <= 0 || r.Bound <= base.Bound || base.Bound <= 0 {
		return false
	}
	ratio := float64(r.Bound) / float64(base.Bound)
	return r.Latency <= ref*(1+(ratio-1)/4)
}
