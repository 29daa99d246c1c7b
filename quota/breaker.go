package quota

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is failoverStore's circuit breaker on the shared store, and the
// owner of an outage's state: after one failed call it opens (degraded:
// the store is bypassed, so a dead Redis costs one timeout, not one per
// request) and probes until the store answers; the first call to succeed
// after that ends the outage. It logs store_degraded when an outage
// begins and store_recovered when it ends, once each per outage however
// many pooled connections it broke. Safe for concurrent use.
type breaker struct {
	probe func(context.Context) error
	every time.Duration
	log   *slog.Logger
	// policy is store.on_error, named in store_degraded.
	policy OnError

	degraded atomic.Bool
	// recovering says a probe answered but no call has yet: the breaker
	// is half open, and the outage ends with the first call that
	// succeeds; one that fails reopens it within the same outage.
	recovering atomic.Bool
	failures   atomic.Int64

	mu      sync.Mutex // guards probing
	probing bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// newBreaker returns a closed breaker that, once open, tries probe (e.g.
// a PING) every probeEvery; Close stops the probe.
func newBreaker(probe func(context.Context) error, probeEvery time.Duration, policy OnError, log *slog.Logger) *breaker {
	return &breaker{probe: probe, every: probeEvery, log: log, policy: policy, stop: make(chan struct{})}
}

// Degraded reports whether the breaker is open: the shared store is
// bypassed.
func (b *breaker) Degraded() bool { return b.degraded.Load() }

// Failures counts failed calls to the shared store (probes included).
func (b *breaker) Failures() int64 { return b.failures.Load() }

// succeeded records a call that succeeded: it ends an outage a probe saw
// end.
func (b *breaker) succeeded() {
	if b.recovering.CompareAndSwap(true, false) {
		b.log.Info("store_recovered")
	}
}

// failed records a call that failed with err: it opens the breaker, once,
// and starts probing.
func (b *breaker) failed(ctx context.Context, err error) {
	b.failures.Add(1)
	if !b.degraded.CompareAndSwap(false, true) {
		return
	}
	if !b.recovering.Load() { // else the outage was logged and goes on
		b.log.Warn("store_degraded", slog.String("on_error", string(b.policy)), slog.String("error", err.Error()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing {
		return
	}
	b.probing = true
	base := context.WithoutCancel(ctx) // the probe outlives the call; Close stops it
	b.wg.Go(func() { b.probeLoop(base) })
}

// probeLoop tries the shared store until it answers, then half-closes the
// breaker: calls go to the store again, and the first to succeed ends the
// outage.
func (b *breaker) probeLoop(base context.Context) {
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(base, max(b.every, 50*time.Millisecond))
		err := b.probe(ctx)
		cancel()
		if err != nil {
			b.failures.Add(1)
			continue
		}
		b.mu.Lock()
		b.probing = false
		b.recovering.Store(true)
		b.degraded.Store(false)
		b.mu.Unlock()
		return
	}
}

// Close stops the probe.
func (b *breaker) Close() {
	close(b.stop)
	b.wg.Wait()
}
