package quota

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// storeRetry is how long the loop waits after a failed store call.
const storeRetry = 50 * time.Millisecond

// releaseDelay is how long a release may wait for the next store call to
// carry it before it gets a call of its own: releases ride on admissions,
// so a busy replica spends no calls on them, and an idle one tells the
// fleet within a few milliseconds.
const releaseDelay = 5 * time.Millisecond

// lazyReleaseDelay replaces releaseDelay while the loop holds credits
// (prefetch.go): far from every limit, the fleet loses nothing by hearing
// of releases a little later, and the replica saves the calls.
const lazyReleaseDelay = 50 * time.Millisecond

// loopState is owned by the Run goroutine.
type loopState struct {
	blocked  [classify.NumClasses]blocker
	lastCall time.Time
	timer    *time.Timer
	armed    time.Time // when the timer fires; zero when stopped
	// releases fires releaseDelay after a release the store has not heard
	// of; pending says one is waiting.
	releases *time.Timer
	pending  bool
	// waiters is a reused buffer for the call's lists.
	waiters [classify.NumClasses][]queued
	// listed are, per class, the waiters the call's list names, position
	// for position (nil for a spare): its grants go to them (hand).
	listed [classify.NumClasses][]*waiter
	pf     prefetchState
	// gen is the credits' generation when the current call's want was
	// made, and waiting how many of want were waiters, not spare.
	gen     uint64
	waiting PerClass
}

// Run serves the queues until ctx ends, then refuses every waiter with
// ErrClosed and tells the store what is still in flight. Call it once.
func (l *limiter) Run(ctx context.Context) error {
	st := &loopState{timer: stoppedTimer(), releases: stoppedTimer()}
	defer st.timer.Stop()
	defer st.releases.Stop()
	beat, stopBeat := heartbeatTicker(l.heartbeat)
	defer stopBeat()
	for {
		force := false
		select {
		case <-ctx.Done():
			l.close()
			l.flush(context.WithoutCancel(ctx))
			return nil
		case <-l.arrive:
		case <-l.freed:
			// Released slots: a class held by the in-flight bound may go
			// now; otherwise the store hears of them, and of the
			// upstream's reports, with the next call, or after releaseDelay.
			tokens := l.tokensFreed.Swap(false)
			all := l.reconfigured.Swap(false)
			for c, b := range st.blocked {
				if all || b == blockedByInFlight || (tokens && b == blockedByWindow) {
					st.blocked[c] = notBlocked
				}
			}
			if !st.pending {
				st.pending = true
				d := releaseDelay
				if st.pf.spare != (PerClass{}) {
					d = lazyReleaseDelay
				}
				st.releases.Reset(d)
			}
		case <-st.releases.C:
			force = st.pending
			// A fresher report may have lifted an upstream hold.
			for c, b := range st.blocked {
				if b == blockedByUpstream {
					st.blocked[c] = notBlocked
				}
			}
		case <-st.timer.C:
			st.armed = time.Time{}
			st.blocked = [classify.NumClasses]blocker{}
			force = l.expireCredits(time.Now()) // the store must hear they are back
		case <-beat:
			force = time.Since(st.lastCall) >= l.heartbeat
		}
		l.round(ctx, st, force)
	}
}

// round calls the store until every class is served or blocked.
func (l *limiter) round(ctx context.Context, st *loopState, force bool) {
	for {
		req := l.ask(st)
		want := req.Want
		if want == (PerClass{}) && !force {
			return
		}
		force = false
		now := time.Now()
		if l.prefetch {
			l.expireCredits(now)
			var admitted [classify.NumClasses]int64
			for c := range admitted {
				admitted[c] = l.admitted[c].Load()
			}
			st.pf.updateRate(now, &admitted)
		}
		lims := l.limits.Load()
		req.Pool, req.Upstream = l.pool, l.pending.take(now)
		req.InFlight, req.Credits = l.occupied()
		req.Limits, req.LocalLimits = lims.enforced, lims.local
		for c := range req.Corrections {
			req.Corrections[c] = l.corrections[c].Swap(0)
		}
		req.Output = l.output.Swap(0)
		res, err := l.store.Take(ctx, req)
		st.lastCall = time.Now()
		if l.onStoreCall != nil {
			l.onStoreCall(st.lastCall.Sub(now), err)
		}
		st.pending = false // the call carried every release and report so far
		if err != nil {
			l.pending.restore(req.Upstream, now)
			for c, n := range req.Corrections {
				l.corrections[c].Add(n)
			}
			l.output.Add(req.Output)
			l.storeFailed(ctx, st, err)
			return
		}
		l.last.set(req, res)
		l.hand(req, res, st, now)
		l.plan(&st.pf, res, lims.enforced)
		more := false
		for c := range want {
			if res.Granted[c] < want[c] {
				st.blocked[c] = res.Blocker[c]
			} else if l.Queued(classify.Class(c)) > 0 {
				more = true // arrived during the call
			}
		}
		if res.RetryAfter > 0 {
			st.arm(max(res.RetryAfter, time.Millisecond))
		}
		l.mu.Lock()
		until := l.credits.deadlineLocked()
		l.mu.Unlock()
		if !until.IsZero() {
			st.arm(max(time.Until(until), time.Millisecond))
		}
		if !more {
			return
		}
	}
}

// ask builds the next call under mu. Per class, every waiter of a class
// that is not blocked is asked for, with spare credits on top
// (prefetch.go); when tokens are enforced, they are listed in the order
// grants go to them (at most maxBatch), spares last.
func (l *limiter) ask(st *loopState) takeRequest {
	var req takeRequest
	tokens := l.limits.Load().enforced.AccountTPM > 0
	l.mu.Lock()
	defer l.mu.Unlock()
	st.waiting = PerClass{}
	for c := range req.Want {
		if st.blocked[c] != notBlocked {
			continue
		}
		cq := &l.classes[c]
		if tokens {
			st.waiters[c], st.listed[c] = l.listLocked(classify.Class(c), st.waiters[c], st.listed[c])
			st.waiting[c] = int64(len(st.waiters[c]))
		} else {
			st.waiting[c] = int64(cq.q.n)
		}
		// Top the credits up when a waiter calls anyway, or when they
		// ran low while requests kept coming; not on every wake-up.
		spare := int64(0)
		n := l.admitted[c].Load()
		if st.waiting[c] > 0 || (n != st.pf.seen[c] && l.credits.lowLocked(classify.Class(c))) {
			st.pf.seen[c] = n
			spare = max(0, st.pf.spare[c]-l.credits.n[c]) // 0 while tokens are enforced (plan)
		}
		req.Want[c] = st.waiting[c] + spare
		if tokens {
			for range spare {
				st.waiters[c] = append(st.waiters[c], queued{}) // for anyone
				st.listed[c] = append(st.listed[c], nil)
			}
			req.Waiters[c] = st.waiters[c]
		}
	}
	st.gen = l.credits.gen
	return req
}

// maxBatch bounds the waiters listed in one call per class.
const maxBatch = 4096

// listLocked lists class c's waiters in the order grants go to them (the
// queue's order), into buf for the store and who, position for position,
// for handing out the grants.
func (l *limiter) listLocked(c classify.Class, buf []queued, who []*waiter) ([]queued, []*waiter) {
	buf, who = buf[:0], who[:0]
	for w := l.classes[c].q.head; w != nil && len(buf) < maxBatch; w = w.next {
		buf = append(buf, queued{Cost: w.cost})
		who = append(who, w)
	}
	return buf, who
}

// storeFailed handles a failed Take: under on_error "closed" every waiter
// is refused at once; otherwise the loop tries again shortly.
func (l *limiter) storeFailed(ctx context.Context, st *loopState, err error) {
	if errors.Is(err, ErrStoreUnavailable) {
		l.refuseAll(ErrStoreUnavailable)
	} else if ctx.Err() == nil {
		l.log.Warn("store_take_failed", slog.String("error", err.Error()))
	}
	l.mu.Lock()
	l.dropCreditsLocked(classify.Classes[:]...)
	l.mu.Unlock()
	st.blocked = [classify.NumClasses]blocker{blockedByWindow, blockedByWindow}
	st.arm(storeRetry)
}

// stoppedTimer is a timer that has not been armed.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// heartbeatTicker ticks every d, and never when d is 0; stop stops it.
func heartbeatTicker(d time.Duration) (beat <-chan time.Time, stop func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// arm makes the timer fire after d, unless it fires sooner already.
func (st *loopState) arm(d time.Duration) {
	at := time.Now().Add(d)
	if !st.armed.IsZero() && st.armed.Before(at) {
		return
	}
	st.armed = at
	st.timer.Reset(d)
}

// refuseAll ends every waiter with err.
func (l *limiter) refuseAll(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.classes {
		for w := l.classes[c].q.head; w != nil; w = l.classes[c].q.head {
			l.dequeueLocked(classify.Class(c), w)
			w.err = err
			close(w.done)
		}
	}
}

// close refuses every waiter and every later Admit with ErrClosed.
func (l *limiter) close() { l.closeWith(ErrClosed) }

// closeWith refuses every waiter and every later Admit with err; the first
// call decides the error.
func (l *limiter) closeWith(err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed, l.closeErr = true, err
	l.dropCreditsLocked(classify.Classes[:]...)
	l.mu.Unlock()
	l.refuseAll(err)
}

// flush tells the store what this replica still holds when the limiter
// stops, so a shared store does not wait for the heartbeat to expire.
func (l *limiter) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req := takeRequest{Pool: l.pool}
	req.InFlight, req.Credits = l.occupied()
	if _, err := l.store.Take(ctx, req); err != nil {
		l.log.Warn("store_flush_failed", slog.String("error", err.Error()))
	}
}
