package quota

import (
	"net/http"
	"sync/atomic"
	"time"
)

// adaptLedger is what a pool's leases saw of the upstream since the
// adaptive bound's last sample (adaptsampler.go), and whether the bound was
// binding. Leases add to it when they are released; the admission loop
// marks saturation; the sampler takes it whole. Atomics only: nothing here
// locks on the request path.
type adaptLedger struct {
	completed, failures, throttled atomic.Int64
	// work is the output tokens 2xx responses reported.
	work atomic.Int64
	// latency is the sum of the completed requests' grant-to-release
	// times, in nanoseconds.
	latency atomic.Int64
	// saturated says a store answer found the bound binding (markSaturated).
	saturated atomic.Bool
}

// adaptCounts are one replica's adaptLedger taken at once: what it adds
// to the pool's sample in the store.
type adaptCounts struct {
	Completed, Failures, Throttled int64
	Work                           int64
	Latency                        time.Duration
	Saturated                      bool
}

// answered counts one upstream exchange that ended after latency with
// HTTP status (0: no answer — a timeout or a connection that failed):
// 2xx is a completion, 429 a throttle, 5xx and 0 a failure; any other
// answer (a 4xx the caller caused) says nothing about the bound.
func (a *adaptLedger) answered(status int, latency time.Duration) {
	switch {
	case status >= 200 && status < 300:
		a.completed.Add(1)
		a.latency.Add(int64(latency))
	case status == http.StatusTooManyRequests:
		a.throttled.Add(1)
	case status == 0 || status >= 500:
		a.failures.Add(1)
	}
}

// take empties the ledger into its counts.
func (a *adaptLedger) take() adaptCounts {
	return adaptCounts{Completed: a.completed.Swap(0), Failures: a.failures.Swap(0), Throttled: a.throttled.Swap(0),
		Work: a.work.Swap(0), Latency: time.Duration(a.latency.Swap(0)), Saturated: a.saturated.Swap(false)}
}

// restore puts back counts take took, for a store call that failed.
func (a *adaptLedger) restore(c adaptCounts) {
	a.completed.Add(c.Completed)
	a.failures.Add(c.Failures)
	a.throttled.Add(c.Throttled)
	a.work.Add(c.Work)
	a.latency.Add(int64(c.Latency))
	if c.Saturated {
		a.saturated.Store(true)
	}
}

// noteAnswer marks the interval saturated when a store answer to a call
// that wanted want under the in-flight bound found the bound binding: a
// class with waiters blocked by it, or the fleet's slots (credits
// included: they are slots taken) at it. The admission loop calls it
// after every store call.
func (a *adaptLedger) noteAnswer(want PerClass, res takeResult, bound int64) {
	binding := bound > 0 && res.FleetInFlight[0]+res.FleetInFlight[1] >= bound
	for c, n := range want {
		binding = binding || (n > 0 && res.Blocker[c] == blockedByInFlight)
	}
	if binding && !a.saturated.Load() {
		a.saturated.Store(true)
	}
}
