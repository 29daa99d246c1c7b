package store

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// outageSummaryEvery is how often a long outage is summarised in the log
// (store_still_degraded), between its first line and its last.
const outageSummaryEvery = time.Minute

// breaker is Failover's circuit breaker on the shared store, and the
// owner of an outage's state: after one failed call it opens (degraded:
// the store is bypassed, so a dead Redis costs one timeout, not one per
// request) and probes until the store answers; the first call to succeed
// after that ends the outage. An outage is three kinds of line, however
// long it lasts and however many pooled connections it broke:
// store_degraded when it begins, store_still_degraded once a minute
// (outageSummaryEvery) with the attempts and the last error, and
// store_recovered when it ends, with how long it lasted. Safe for
// concurrent use.
type breaker struct {
	probe prober
	log   *slog.Logger
	// policy is store.on_error, named in store_degraded.
	policy OnError
	now    func() time.Time
	// recovered, when set, is called as an outage ends (go-redis's own
	// messages flush their count then: RedisLog).
	recovered func()

	degraded atomic.Bool
	// recovering says a probe answered but no call has yet: the breaker
	// is half open, and the outage ends with the first call that
	// succeeds; one that fails reopens it within the same outage.
	recovering atomic.Bool
	failures   atomic.Int64

	mu   sync.Mutex // guards out
	out  outage
	stop chan struct{}
	wg   sync.WaitGroup
}

// prober is how the breaker tries the store while it is open: call (e.g.
// a PING) every every.
type prober struct {
	call  func(context.Context) error
	every time.Duration
}

// outage is the breaker's record of the outage going on; guarded by
// breaker.mu.
type outage struct {
	// probing says the probe loop runs.
	probing bool
	// began is when the outage began, summarized when it was last logged;
	// failedBefore the breaker's failures count when it began.
	began, summarized time.Time
	failedBefore      int64
	lastErr           string
}

// newBreaker returns a closed breaker that, once open, tries probe (e.g.
// a PING) every probeEvery; Close stops the probe.
func newBreaker(probe func(context.Context) error, probeEvery time.Duration, policy OnError, log *slog.Logger) *breaker {
	return &breaker{probe: prober{call: probe, every: probeEvery}, log: log, policy: policy, now: time.Now, stop: make(chan struct{})}
}

// Degraded reports whether the breaker is open: the shared store is
// bypassed.
func (b *breaker) Degraded() bool { return b.degraded.Load() }

// Failures counts failed calls to the shared store (probes included).
func (b *breaker) Failures() int64 { return b.failures.Load() }

// succeeded records a call that succeeded: it ends an outage a probe saw
// end.
func (b *breaker) succeeded() {
	if !b.recovering.CompareAndSwap(true, false) {
		return
	}
	b.mu.Lock()
	out := b.out
	b.mu.Unlock()
	b.log.Info("store_recovered", slog.Duration("outage", b.now().Sub(out.began).Round(time.Millisecond)),
		slog.Int64("failed_calls", b.failures.Load()-out.failedBefore))
	if b.recovered != nil {
		b.recovered()
	}
}

// failed records a call that failed with err: it opens the breaker, once,
// and starts probing.
func (b *breaker) failed(ctx context.Context, err error) {
	b.failures.Add(1)
	if !b.degraded.CompareAndSwap(false, true) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.recovering.Load() { // else the outage was logged and goes on
		now := b.now()
		b.out = outage{began: now, summarized: now, failedBefore: b.failures.Load() - 1}
		b.log.Warn("store_degraded", slog.String("on_error", string(b.policy)), slog.String("error", err.Error()))
	}
	b.out.lastErr = err.Error()
	if b.out.probing {
		return
	}
	b.out.probing = true
	base := context.WithoutCancel(ctx) // the probe outlives the call; Close stops it
	b.wg.Go(func() { b.probeLoop(base) })
}

// probeLoop tries the shared store until it answers, then half-closes the
// breaker: calls go to the store again, and the first to succeed ends the
// outage.
func (b *breaker) probeLoop(base context.Context) {
	t := time.NewTicker(b.probe.every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(base, max(b.probe.every, 50*time.Millisecond))
		err := b.probe.call(ctx)
		cancel()
		if err != nil {
			b.failures.Add(1)
			b.stillDown(err)
			continue
		}
		b.mu.Lock()
		b.out.probing = false
		b.recovering.Store(true)
		b.degraded.Store(false)
		b.mu.Unlock()
		return
	}
}

// stillDown records a failed probe, and summarises the outage once every
// outageSummaryEvery.
func (b *breaker) stillDown(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out.lastErr = err.Error()
	now := b.now()
	if now.Sub(b.out.summarized) < outageSummaryEvery {
		return
	}
	b.out.summarized = now
	b.log.Warn("store_still_degraded", slog.Duration("for", now.Sub(b.out.began).Round(time.Second)),
		slog.Int64("failed_calls", b.failures.Load()-b.out.failedBefore), slog.String("last_error", b.out.lastErr))
}

// Close stops the probe.
func (b *breaker) Close() {
	close(b.stop)
	b.wg.Wait()
}
