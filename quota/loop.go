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
	// costs are reused buffers for takeRequest.Costs.
	costs [classify.NumClasses][]int64
	pf    prefetchState
	// gen is the credits' generation when the current call's want was
	// made, and waiting how many of want were waiters, not spare.
	gen     uint64
	waiting PerClass
}

// Run serves the queues until ctx ends, then refuses every waiter with
// ErrClosed and tells the store what is still in flight. Call it once.
func (l *limiter) Run(ctx context.Context) error {
	st := &loopState{timer: time.NewTimer(time.Hour), releases: time.NewTimer(time.Hour)}
	st.timer.Stop()
	st.releases.Stop()
	defer st.timer.Stop()
	defer st.releases.Stop()
	var beat <-chan time.Time
	if l.heartbeat > 0 {
		t := time.NewTicker(l.heartbeat)
		defer t.Stop()
		beat = t.C
	}
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
			// now; otherwise the store hears of them, and of the upstream's
			// reports, with the next call, or after releaseDelay.
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
			force = time.Since(st.lastCall) >= l.heartbeat && (!l.quiet || l.occupied() != PerClass{})
		}
		l.round(ctx, st, force)
	}
}

// round calls the store until every class is served or blocked.
func (l *limiter) round(ctx context.Context, st *loopState, force bool) {
	for {
		want := l.wants(st)
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
		req := takeRequest{Want: want, InFlight: l.occupied(), Upstream: l.pending.take(now), Costs: l.costs(want, st),
			Limits: lims.enforced, LocalLimits: lims.local}
		for c := range req.Corrections {
			req.Corrections[c] = l.corrections[c].Swap(0)
		}
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
			l.storeFailed(ctx, st, err)
			return
		}
		l.last.set(res)
		l.hand(res, want, st, now)
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

// maxBatch bounds one call's grants per class when tokens are enforced, so
// the list of estimates sent stays small.
const maxBatch = 4096

// wants is how many of each class to ask for: every waiter of a class that
// is not blocked.
func (l *limiter) wants(st *loopState) PerClass {
	var want PerClass
	l.mu.Lock()
	defer l.mu.Unlock()
	st.waiting = PerClass{}
	for c := range want {
		if st.blocked[c] == notBlocked {
			want[c] = int64(l.classes[c].q.n)
			if l.limits.Load().enforced.AccountTPM > 0 {
				want[c] = min(want[c], maxBatch)
			}
			st.waiting[c] = want[c]
			// Top the credits up when a waiter calls anyway, or when they
			// ran low while requests kept coming; not on every wake-up.
			n := l.admitted[c].Load()
			if want[c] > 0 || (n != st.pf.seen[c] && l.credits.lowLocked(classify.Class(c))) {
				st.pf.seen[c] = n
				want[c] += max(0, st.pf.spare[c]-l.credits.n[c])
			}
		}
	}
	st.gen = l.credits.gen
	return want
}

// costs lists the token estimates of the first want waiters of each class,
// reusing the loop's buffers; nil when tokens are not enforced. Waiters
// that leave meanwhile only shorten the grant.
func (l *limiter) costs(want PerClass, st *loopState) [classify.NumClasses][]int64 {
	var out [classify.NumClasses][]int64
	if l.limits.Load().enforced.AccountTPM <= 0 {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range out {
		buf := st.costs[c][:0]
		for w := l.classes[c].q.head; w != nil && int64(len(buf)) < want[c]; w = w.next {
			buf = append(buf, w.cost)
		}
		st.costs[c], out[c] = buf, buf
	}
	return out
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

// arm makes the timer fire after d, unless it fires sooner already.
func (st *loopState) arm(d time.Duration) {
	at := time.Now().Add(d)
	if !st.armed.IsZero() && st.armed.Before(at) {
		return
	}
	st.armed = at
	st.timer.Reset(d)
}

// hand gives each class's grants to its oldest waiters; grants nobody is
// left to take become credits when the call asked for spare ones (sent is
// when it was sent), and are released at once otherwise.
func (l *limiter) hand(res takeResult, want PerClass, st *loopState, sent time.Time) {
	var excess PerClass
	l.mu.Lock()
	stale := st.gen != l.credits.gen // credits were dropped while the call was out
	if res.UpstreamHold > 0 {
		l.dropCreditsLocked(classify.Bulk) // the store holds bulk now; InFlight tells it on the next call
	}
	for c := range res.Granted {
		cq := &l.classes[c]
		var given int64
		limit := res.Granted[c]
		if stale {
			limit = min(limit, st.waiting[c]) // spare grants predate the drop: none to newcomers
		}
		for given < limit {
			w := cq.q.pop()
			if w == nil {
				break
			}
			w.granted = true
			w.held = w.held || w.gen != cq.shortfalls
			// Counted before the waiter can run: its Release must never
			// find the count without it (it went to -1 for a moment).
			l.inFlight[c].Add(1)
			close(w.done)
			given++
		}
		short := res.Granted[c] < want[c]
		if short {
			cq.shortfalls++
		}
		cq.short = short && cq.q.n > 0
		l.admitted[c].Add(given)
		excess[c] = res.Granted[c] - given
		bulkHeld := c == int(classify.Bulk) && res.UpstreamHold > 0
		if excess[c] > 0 && st.pf.spare[c] > 0 && !stale && !bulkHeld {
			// The store charged them to the second it decided in, which
			// ends SecondLeft after it decided, no sooner than sent+SecondLeft.
			l.credits.grantLocked(classify.Class(c), excess[c], sent.Add(res.SecondLeft))
			excess[c] = 0
		}
	}
	l.mu.Unlock()
	if excess != (PerClass{}) {
		notify(l.freed) // the store counted them; the next call hands them back
	}
}

// refuseAll ends every waiter with err.
func (l *limiter) refuseAll(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.classes {
		for w := l.classes[c].q.pop(); w != nil; w = l.classes[c].q.pop() {
			w.err = err
			close(w.done)
		}
	}
}

// close refuses every waiter and every later Admit with ErrClosed.
func (l *limiter) close() {
	l.mu.Lock()
	l.closed = true
	l.dropCreditsLocked(classify.Classes[:]...)
	l.mu.Unlock()
	l.refuseAll(ErrClosed)
}

// flush tells the store what this replica still holds when the limiter
// stops, so a shared store does not wait for the heartbeat to expire.
func (l *limiter) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := l.store.Take(ctx, takeRequest{InFlight: l.occupied()}); err != nil {
		l.log.Warn("store_flush_failed", slog.String("error", err.Error()))
	}
}
