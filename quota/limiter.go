package quota

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"golang.org/x/sync/errgroup"
)

// Limiter admits requests against a Store, one dispatcher per class. It is
// safe for concurrent use. Admit may be called before Run starts; waiters
// are served once it does.
type Limiter struct {
	store  Store
	log    *slog.Logger
	limits Limits

	classes [classify.NumClasses]*dispatcher
	// inFlight counts this replica's leases not yet released, by class.
	inFlight [classify.NumClasses]atomic.Int64
	// pending holds released slots not yet returned to the store.
	pending     [classify.NumClasses]atomic.Int64
	releaseKick chan struct{}
}

// New returns a Limiter for cfg's classes over store; limits are the ones
// the store enforces, used to estimate Retry-After.
func New(cfg Config, limits Limits, store Store, log *slog.Logger) *Limiter {
	l := &Limiter{store: store, log: log, limits: limits, releaseKick: make(chan struct{}, 1)}
	ic, bc := cfg.Classes.Interactive, cfg.Classes.Bulk
	l.classes[classify.Interactive] = newDispatcher(l, classify.Interactive, ic.MaxWait, ic.MaxQueue)
	l.classes[classify.Bulk] = newDispatcher(l, classify.Bulk, bc.MaxWait, bc.MaxQueue)
	return l
}

// Run serves the queues until ctx ends, then refuses every waiter with
// ErrClosed and returns released slots to the store. Call it once.
func (l *Limiter) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, d := range l.classes {
		g.Go(func() error { d.run(ctx); return nil })
	}
	g.Go(func() error { l.runReleaser(ctx); return nil })
	return g.Wait()
}

// Admit waits until a request of class c may go upstream and returns its
// Lease, which the caller must Release when the upstream exchange ends. It
// returns a *RefusedError when the queue is full or max_wait passes,
// ErrClosed after Run has stopped, or the context's error if ctx ends first.
func (l *Limiter) Admit(ctx context.Context, c classify.Class) (*Lease, error) {
	a, err := l.classes[c].admit(ctx)
	if err != nil {
		return nil, err
	}
	return &Lease{l: l, class: c, held: a.held}, nil
}

// Queued returns how many requests of class c are waiting.
func (l *Limiter) Queued(c classify.Class) int { return l.classes[c].queued() }

// InFlight returns how many leases of class c this replica holds.
func (l *Limiter) InFlight(c classify.Class) int64 { return l.inFlight[c].Load() }

// Lease is one admitted request's claim on an in-flight slot.
type Lease struct {
	l        *Limiter
	class    classify.Class
	held     bool
	released atomic.Bool
}

// Held reports whether the request had to wait for a later window or a
// released slot before it was admitted.
func (s *Lease) Held() bool { return s.held }

// Release returns the slot. It never blocks on the store: releases are
// coalesced and sent in the background. Calls after the first do nothing.
func (s *Lease) Release() {
	if s.released.CompareAndSwap(false, true) {
		s.l.release(s.class, 1)
	}
}

func (l *Limiter) release(c classify.Class, n int64) {
	l.inFlight[c].Add(-n)
	l.pending[c].Add(n)
	notify(l.releaseKick)
}

// takeReleases claims every pending release for one store call.
func (l *Limiter) takeReleases() (rel [classify.NumClasses]int64, released bool) {
	for c := range rel {
		rel[c] = l.pending[c].Swap(0)
		released = released || rel[c] > 0
	}
	return rel, released
}

// restoreReleases puts back releases a failed store call did not apply.
func (l *Limiter) restoreReleases(rel [classify.NumClasses]int64) {
	for c, n := range rel {
		if n > 0 {
			l.pending[c].Add(n)
		}
	}
}

// slotsFreed tells every dispatcher that in-flight room appeared.
func (l *Limiter) slotsFreed() {
	for _, d := range l.classes {
		notify(d.freed)
	}
}

// releaseRetry is how long the releaser waits after a failed store call.
const releaseRetry = 100 * time.Millisecond

func (l *Limiter) runReleaser(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			l.flushReleases(context.WithoutCancel(ctx))
			return
		case <-l.releaseKick:
		}
		rel, released := l.takeReleases()
		if !released {
			continue
		}
		if err := l.store.Release(ctx, rel); err != nil {
			l.restoreReleases(rel)
			l.log.Warn("release_failed", slog.String("error", err.Error()))
			time.AfterFunc(releaseRetry, func() { notify(l.releaseKick) })
			continue
		}
		l.slotsFreed()
	}
}

// flushReleases returns whatever is pending when the limiter stops.
func (l *Limiter) flushReleases(ctx context.Context) {
	rel, released := l.takeReleases()
	if !released {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.store.Release(ctx, rel); err != nil {
		l.log.Warn("release_failed", slog.String("error", err.Error()))
	}
}

// retryAfter estimates when a request behind ahead others of class c may be
// admitted, at least a second and at most an hour.
func (l *Limiter) retryAfter(c classify.Class, ahead int) time.Duration {
	rpm := l.limits.AccountRPM
	if c == classify.Bulk {
		rpm = l.limits.BulkRPM
		if l.limits.Borrow {
			rpm = l.limits.AccountRPM - l.limits.ReserveRPM
		}
	}
	rate := perSecond(rpm)
	if rate <= 0 {
		return time.Hour
	}
	secs := math.Ceil(float64(ahead+1) / rate)
	return time.Duration(min(max(secs, 1), 3600)) * time.Second
}

// notify wakes a goroutine waiting on ch without blocking; ch has room for
// one wake-up, so bursts coalesce.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
