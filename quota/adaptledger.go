package quota

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
)

// adaptLedger is what a pool's leases saw of the upstream since the
// adaptive bound's last sample (adaptrun.go), and whether the bound was
// binding. Leases add to it when they are granted (their time in flight)
// and released; the admission loop marks saturation; the sampler takes it
// whole. Atomics only: nothing here locks on the request path.
type adaptLedger struct {
	completed, failures, throttled atomic.Int64
	// work is the output tokens 2xx responses reported.
	work atomic.Int64
	// latency is the sum of the completed requests' grant-to-release
	// times, in nanoseconds.
	latency atomic.Int64
	// saturated says a store answer found the bound binding (markSaturated).
	saturated atomic.Bool
	// busy is the time every lease was in flight, summed (busyUntil).
	busy adaptBusy
}

// adaptBusy integrates the number of leases in flight over time, with
// atomics: busyUntil(t), the lease-time in flight from the start to t, is
// closed (the whole time of the leases released) plus, for the open
// ones, n·t − Σ grant — both sums in microseconds since the Unix epoch.
// The three are not read at once, so a lease released between the reads
// moves one reading by at most its own time in flight; the next reading
// corrects it, as the difference of two readings is what is sampled.
type adaptBusy struct {
	closed, open, openSince atomic.Int64
	// last is busyUntil's value as of the last take (the sampler's only).
	last int64
}

// begin counts a lease in flight from at.
func (b *adaptBusy) begin(at time.Time) {
	b.openSince.Add(at.UnixMicro())
	b.open.Add(1)
}

// end counts a lease begun at from out at now.
func (b *adaptBusy) end(from, now time.Time) {
	b.closed.Add(now.UnixMicro() - from.UnixMicro())
	b.open.Add(-1)
	b.openSince.Add(-from.UnixMicro())
}

// since returns the lease-time in flight since the last call, up to now.
func (b *adaptBusy) since(now time.Time) time.Duration {
	c := b.closed.Load() + b.open.Load()*now.UnixMicro() - b.openSince.Load()
	d := c - b.last
	b.last = c
	return time.Duration(d) * time.Microsecond
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

// take empties the ledger into its counts, its busy time up to now. One
// goroutine takes (the sampler's).
func (a *adaptLedger) take(now time.Time) store.AdaptCounts {
	return store.AdaptCounts{Completed: a.completed.Swap(0), Failures: a.failures.Swap(0), Throttled: a.throttled.Swap(0),
		Work: a.work.Swap(0), Latency: time.Duration(a.latency.Swap(0)), Busy: a.busy.since(now), Saturated: a.saturated.Swap(false)}
}

// add puts counts into the ledger, as leases would have (tests feed it
// so).
func (a *adaptLedger) add(c store.AdaptCounts) {
	a.completed.Add(c.Completed)
	a.failures.Add(c.Failures)
	a.throttled.Add(c.Throttled)
	a.work.Add(c.Work)
	a.latency.Add(int64(c.Latency))
	a.busy.closed.Add(c.Busy.Microseconds())
	if c.Saturated {
		a.saturated.Store(true)
	}
}

// noteAnswer marks the interval saturated when a store answer to a call
// that wanted want under the in-flight bound found the bound binding: a
// class with waiters blocked by it, or the fleet's slots (credits
// included: they are slots taken) at it. The admission loop calls it
// after every store call.
func (a *adaptLedger) noteAnswer(want store.PerClass, res store.TakeResult, bound int64) {
	binding := bound > 0 && res.FleetInFlight[0]+res.FleetInFlight[1] >= bound
	for c, n := range want {
		binding = binding || (n > 0 && res.Blocker[c] == store.BlockedByInFlight)
	}
	if binding && !a.saturated.Load() {
		a.saturated.Store(true)
	}
}
