package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// storeRetry is how long a dispatcher waits after a failed store call.
const storeRetry = 50 * time.Millisecond

// dispatcher serves one class's queue: it asks the store for as many grants
// as there are waiters, in one call, and hands them out first come first
// served.
type dispatcher struct {
	l        *Limiter
	class    classify.Class
	maxWait  time.Duration
	maxQueue int

	mu     sync.Mutex
	q      queue
	closed bool
	// shortfalls counts store calls that left waiters queued; a waiter that
	// saw one (joined before it, or while blocked) was held.
	shortfalls uint64
	waiting    bool // a shortfall is unresolved: new waiters are held

	arrive chan struct{} // a waiter joined the queue
	freed  chan struct{} // in-flight slots were returned to the store

	// blocked and timer are owned by the run goroutine.
	blocked Blocker
}

func newDispatcher(l *Limiter, c classify.Class, maxWait time.Duration, maxQueue int) *dispatcher {
	return &dispatcher{
		l: l, class: c, maxWait: maxWait, maxQueue: maxQueue,
		arrive: make(chan struct{}, 1), freed: make(chan struct{}, 1),
	}
}

func (d *dispatcher) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.q.n
}

// admit queues the caller and waits for a grant, max_wait or ctx.
// admission is what admit tells the Limiter about a grant.
type admission struct{ held bool }

func (d *dispatcher) admit(ctx context.Context) (admission, error) {
	w := &waiter{done: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return admission{}, ErrClosed
	}
	if n := d.q.n; n >= d.maxQueue {
		d.mu.Unlock()
		return admission{}, &RefusedError{Class: d.class, Reason: ErrQueueFull, RetryAfter: d.l.retryAfter(d.class, n)}
	}
	w.gen, w.held = d.shortfalls, d.waiting
	d.q.push(w)
	d.mu.Unlock()
	notify(d.arrive)

	timer := time.NewTimer(d.maxWait)
	defer timer.Stop()
	var cause error
	select {
	case <-w.done:
		if w.granted {
			return admission{held: w.held}, nil
		}
		return admission{}, ErrClosed
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = ErrWaitTimeout
	}
	return d.leave(w, cause)
}

// leave takes w out of the queue after it gave up. A grant that raced the
// timeout is kept; one that raced a cancellation is handed back.
func (d *dispatcher) leave(w *waiter, cause error) (admission, error) {
	d.mu.Lock()
	granted, held := w.granted, w.held
	d.q.remove(w)
	ahead := d.q.n
	d.mu.Unlock()
	switch {
	case granted && errors.Is(cause, ErrWaitTimeout):
		return admission{held: held}, nil
	case granted:
		d.l.release(d.class, 1)
		return admission{}, cause
	case errors.Is(cause, ErrWaitTimeout):
		return admission{}, &RefusedError{Class: d.class, Reason: ErrWaitTimeout, RetryAfter: d.l.retryAfter(d.class, ahead)}
	default:
		return admission{}, cause
	}
}

func (d *dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			d.close()
			return
		case <-d.arrive:
			if d.blocked != NotBlocked {
				continue // the timer or a release retries
			}
		case <-d.freed:
			if d.blocked == BlockedByWindow {
				continue // the window, not in-flight, is the limit
			}
		case <-timer.C:
		}
		d.blocked = NotBlocked
		if retry := d.dispatch(ctx); retry > 0 {
			timer.Reset(retry)
		}
	}
}

// dispatch grants as many waiters as the store allows. It returns when to
// try again, or 0 when the queue is empty.
func (d *dispatcher) dispatch(ctx context.Context) time.Duration {
	for {
		d.mu.Lock()
		want := int64(d.q.n)
		d.mu.Unlock()
		if want == 0 {
			return 0
		}
		rel, released := d.l.takeReleases()
		res, err := d.l.store.Take(ctx, TakeRequest{Class: d.class, Want: want, Release: rel})
		if err != nil {
			d.l.restoreReleases(rel)
			if ctx.Err() == nil {
				d.l.log.Warn("store_take_failed", slog.String("class", d.class.String()), slog.String("error", err.Error()))
			}
			d.blocked = BlockedByWindow
			return storeRetry
		}
		if released {
			d.l.slotsFreed()
		}
		d.hand(res.Granted, res.Granted < want)
		if res.Granted < want {
			d.blocked = res.Blocker
			return max(res.RetryAfter, time.Millisecond)
		}
	}
}

// hand gives n grants to the oldest waiters; grants nobody is left to take
// go back to the store. short says the store granted fewer than asked: the
// waiters left behind are held.
func (d *dispatcher) hand(n int64, short bool) {
	var given int64
	d.mu.Lock()
	for given < n {
		w := d.q.pop()
		if w == nil {
			break
		}
		w.granted = true
		w.held = w.held || w.gen != d.shortfalls
		close(w.done)
		given++
	}
	if short {
		d.shortfalls++
	}
	d.waiting = short && d.q.n > 0
	d.mu.Unlock()
	d.l.inFlight[d.class].Add(given)
	if excess := n - given; excess > 0 {
		d.l.inFlight[d.class].Add(excess)
		d.l.release(d.class, excess)
	}
}

// close refuses every waiter and every later Admit with ErrClosed.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for w := d.q.pop(); w != nil; w = d.q.pop() {
		close(w.done)
	}
}
