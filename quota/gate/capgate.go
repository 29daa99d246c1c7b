package gate

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

var _ Gate = (*CapGate)(nil)

// CapGate is the callers' caps (callers[].max_in_flight,
// requests_per_minute) as a Gate: a capped caller's request takes
// a slot under its cap, counted fleet-wide by a CapCounter, before it
// waits for its pool; an uncapped caller's passes at once. A capped
// caller's waiters stand in a line of its own, apart from the pools'
// queues, so a runaway caller waits behind its own cap while the rest
// of its class goes on; its line holds at most its class's max_queue.
// One loop (Run) asks the counter for the lines that have waiters, have
// released slots, or must show they are alive. Safe for concurrent use;
// Start may be called before Run, and waiters are served once it runs.
type CapGate struct {
	counter CapCounter
	// heartbeat is how often a line holding slots tells the counter it
	// is alive; 0: only when there is something to ask or release.
	heartbeat time.Duration
	log       *slog.Logger
	wake      chan struct{}
	// inline says the counter is in process: a request with nobody ahead
	// of it asks it at once, under mu, rather than through the loop.
	inline bool
	// capped are the capped callers' names, as of the last Reconfigure:
	// anyone else passes without taking mu.
	capped atomic.Pointer[map[string]bool]

	mu       sync.Mutex
	lines    map[string]*capLine
	maxQueue [classify.NumClasses]int
	closed   bool
	closeErr error
}

// capLine is one capped caller on this replica: its cap, its waiters
// and its slots. Its fields are guarded by CapGate.mu. A line whose cap
// a reload lifted stays until the counter has heard its last slot come
// back.
type capLine struct {
	name         string
	cap          Cap // zero once lifted
	fleet, local capBounds
	waiting      [classify.NumClasses][]*capWaiter // interactive served first
	// inFlight is the slots this replica holds under the cap; reported
	// what the counter last heard; fleetInFlight its last word on the
	// fleet's; sec the window second of its last grant.
	inFlight, reported, fleetInFlight, sec int64
	// retryAt is when the counter may grant again; zero: at once, or when
	// a slot comes back.
	retryAt time.Time
	// asking says the loop has a call for ln out: nobody else asks then.
	asking bool
}

// capWaiter is one request waiting in a capLine; guarded by CapGate.mu,
// but for done, closed once when it is answered.
type capWaiter struct {
	done chan struct{}
	// granted says it may go; free that it holds no slot (its cap was
	// lifted while it waited); held that it waited for a later second or
	// a slot; err why it may not go.
	granted, free, held bool
	err                 error
}

func (ln *capLine) lifted() bool { return ln.cap == (Cap{}) }

func (ln *capLine) queued() int {
	return len(ln.waiting[classify.Interactive]) + len(ln.waiting[classify.Bulk])
}

// NewCapGate returns a gate counting on counter, with heartbeat as
// CapGate.heartbeat.
func NewCapGate(counter CapCounter, heartbeat time.Duration, log *slog.Logger) *CapGate {
	_, inline := counter.(*MemoryCapCounter)
	return &CapGate{counter: counter, heartbeat: heartbeat, log: log, inline: inline,
		wake: make(chan struct{}, 1), lines: map[string]*capLine{}}
}

// LineCount is how many callers' lines g keeps: capped callers', and
// lifted caps' whose slots the counter has not yet heard come back.
func (g *CapGate) LineCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.lines)
}

// LastSecond is the window second of caller's last grant under its cap
// (0 when it has no line).
func (g *CapGate) LastSecond(caller string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ln := g.lines[caller]; ln != nil {
		return ln.sec
	}
	return 0
}

// Reconfigure applies the configured caps, with replicas the account's
// expected_replicas (the per-replica fallback divides by it), and the
// classes' max_queue: a new cap starts at once, a changed one applies
// from the counter's next call, a lifted one lets its waiters go (they
// hold no slot) and its line goes once the counter heard its last slot
// come back.
func (g *CapGate) Reconfigure(cl Classes, replicas int64, caps map[string]Cap) {
	capped := make(map[string]bool, len(caps))
	for name := range caps {
		capped[name] = true
	}
	g.mu.Lock()
	g.capped.Store(&capped)
	g.maxQueue = cl.MaxQueue
	for name, ln := range g.lines {
		if _, ok := caps[name]; !ok && !ln.lifted() {
			ln.cap, ln.fleet, ln.local = Cap{}, capBounds{}, capBounds{}
			for c := range ln.waiting {
				for _, w := range ln.waiting[c] {
					w.granted, w.free = true, true
					close(w.done)
				}
				ln.waiting[c] = nil
			}
		}
	}
	for name, cp := range caps {
		ln := g.lines[name]
		if ln == nil {
			ln = &capLine{name: name}
			g.lines[name] = ln
		}
		ln.cap, ln.fleet, ln.local = cp, cp.bounds(1), cp.bounds(replicas)
		ln.retryAt = time.Time{}
	}
	g.mu.Unlock()
	store.Notify(g.wake)
}

// Start implements Gate.
func (g *CapGate) Start(ctx context.Context, r Request, until time.Time) (Pass, error) {
	caller, class := r.Caller, r.Class
	if capped := g.capped.Load(); capped == nil || !(*capped)[caller] {
		return Pass{}, nil
	}
	g.mu.Lock()
	if g.closed {
		err := g.closeErr
		g.mu.Unlock()
		return Pass{}, err
	}
	ln := g.lines[caller]
	if ln == nil || ln.lifted() {
		g.mu.Unlock()
		return Pass{}, nil
	}
	if p, ok := g.passAtOnceLocked(ctx, ln); ok {
		g.mu.Unlock()
		return p, nil
	}
	if ahead := len(ln.waiting[class]); ahead >= g.maxQueue[class] {
		retry := ln.cap.retryAfter(ahead)
		g.mu.Unlock()
		return Pass{}, &RefusedError{Class: class, Reason: ErrQueueFull, Caller: caller, RetryAfter: retry}
	}
	w := &capWaiter{done: make(chan struct{})}
	ln.waiting[class] = append(ln.waiting[class], w)
	g.mu.Unlock()
	store.Notify(g.wake)

	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	var cause error
	select {
	case <-w.done:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.passLocked(ln, w)
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = ErrWaitTimeout
	}
	return g.leave(ln, class, w, cause)
}

// passAtOnceLocked asks an in-process counter for a slot under ln's cap
// at once when nobody waits in ln: no loop round for a request its cap
// has room for. It reports whether it got one.
func (g *CapGate) passAtOnceLocked(ctx context.Context, ln *capLine) (Pass, bool) {
	if !g.inline || ln.queued() > 0 || ln.asking {
		return Pass{}, false
	}
	t := ln.takeLocked()
	t.Want = 1
	ans, err := g.counter.take(ctx, t)
	if err != nil || ans.Granted == 0 {
		return Pass{}, false
	}
	ln.reported, ln.fleetInFlight, ln.sec = t.InFlight+1, ans.FleetInFlight, ans.Sec
	ln.inFlight++
	return g.slotPass(ln, false), true
}

// leave takes w out of its line after it gave up. A grant that raced the
// timeout is kept; one that raced a cancellation is given back.
func (g *CapGate) leave(ln *capLine, class classify.Class, w *capWaiter, cause error) (Pass, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	timedOut := errors.Is(cause, ErrWaitTimeout)
	switch {
	case w.granted && timedOut, w.err != nil:
		return g.passLocked(ln, w)
	case w.granted: // it never went: its slot comes back
		if !w.free {
			g.giveBackLocked(ln)
		}
		return Pass{}, cause
	}
	ln.waiting[class] = slices.DeleteFunc(ln.waiting[class], func(o *capWaiter) bool { return o == w })
	if !timedOut {
		return Pass{}, cause
	}
	retry := ln.cap.retryAfter(len(ln.waiting[class]))
	return Pass{}, &RefusedError{Class: class, Reason: ErrWaitTimeout, Caller: ln.name, RetryAfter: retry}
}

// passLocked is the pass of w, answered: a slot under ln's cap, given
// back once; none when its cap was lifted; w's error when it was refused.
func (g *CapGate) passLocked(ln *capLine, w *capWaiter) (Pass, error) {
	if w.err != nil {
		return Pass{}, w.err
	}
	if w.free {
		return Pass{Held: w.held, HeldBy: HeldByCap}, nil
	}
	return g.slotPass(ln, w.held), nil
}

// slotPass is the pass of a slot under ln's cap, given back once.
func (g *CapGate) slotPass(ln *capLine, held bool) Pass {
	var once sync.Once
	return Pass{Held: held, HeldBy: HeldByCap, OnRelease: func() { once.Do(func() { g.giveBack(ln) }) }}
}

// giveBack returns one of ln's slots; the counter hears of it on the
// loop's next call.
func (g *CapGate) giveBack(ln *capLine) {
	g.mu.Lock()
	g.giveBackLocked(ln)
	g.mu.Unlock()
}

func (g *CapGate) giveBackLocked(ln *capLine) {
	ln.inFlight--
	ln.retryAt = time.Time{} // the slot may be what its waiters wait for
	store.Notify(g.wake)
}

// States returns the capped callers' numbers, by caller name.
func (g *CapGate) States() map[string]CapState {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]CapState{}
	for name, ln := range g.lines {
		if ln.lifted() {
			continue
		}
		out[name] = CapState{MaxInFlight: ln.cap.MaxInFlight, RequestsPerMinute: ln.cap.RequestsPerMinute,
			Queued: ln.queued(), InFlight: ln.inFlight, FleetInFlight: ln.fleetInFlight}
	}
	return out
}
