package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// releaseDelay is how long a release may wait for the next store call to
// carry it before it gets a call of its own: releases ride on admissions,
// so a busy replica spends no calls on them, and an idle one tells the
// fleet within a few milliseconds.
const releaseDelay = 5 * time.Millisecond

// lazyReleaseDelay replaces releaseDelay while the loop holds credits
// (prefetch.go): far from every limit, the fleet loses nothing by hearing
// of releases a little later, and the replica saves the calls.
const lazyReleaseDelay = 50 * time.Millisecond

// admissionLoop is a limiter's one goroutine that talks to the store:
// it asks for grants for the waiters in its wait queue, hands them out,
// and carries the leases' releases and settlements and the upstream's
// reports. What it is set up with is set before Run; last and pending
// are its own, safe for concurrent use, for the limiter to read and add
// to.
type admissionLoop struct {
	store store.Store
	// pool is the pool the limiter admits to (pool.go).
	pool string
	log  *slog.Logger
	// heartbeat is the longest the loop stays silent towards the store
	// while the pool is live (keepAlive); 0 means it only calls when there
	// is something to ask or release.
	heartbeat time.Duration
	// prefetch lets the loop take credits (prefetch.go).
	prefetch bool
	// onStoreCall, when set, observes every store call.
	onStoreCall func(d time.Duration, err error)
	// limits, queue, leases and sig are its limiter's.
	limits *atomic.Pointer[limitSet]
	queue  *waitQueue
	leases *ledger
	sig    *signals
	// last is the store's last answer: the fleet's in flight, the hold,
	// the window's use.
	last lastAnswer
	// pending is what the upstream said since the last store call.
	pending pendingReport
}

// loopState is one Run's state, owned by its goroutine.
type loopState struct {
	blocked  [classify.NumClasses]store.Blocker
	lastCall time.Time
	timer    *time.Timer
	armed    time.Time // when the timer fires; zero when stopped
	// releases fires releaseDelay after a release the store has not heard
	// of; pending says one is waiting.
	releases *time.Timer
	pending  bool
	// beat fires a heartbeat after the last store call, while the pool is
	// live (keepAlive); stopped otherwise.
	beat *time.Timer
	// call is the current store call's list of waiters.
	call callList
	pf   prefetchState
}

// run serves the queues until ctx ends, then refuses every waiter with
// gate.ErrClosed and tells the store what is still in flight.
func (lp *admissionLoop) run(ctx context.Context) error {
	st := &loopState{timer: store.StoppedTimer(), releases: store.StoppedTimer(), beat: store.StoppedTimer()}
	defer st.timer.Stop()
	defer st.releases.Stop()
	defer st.beat.Stop()
	if lp.heartbeat > 0 {
		st.beat.Reset(lp.heartbeat) // the first call: the fleet hears of the replica, the replica of the fleet
	}
	for {
		force := false
		select {
		case <-ctx.Done():
			lp.queue.close(gate.ErrClosed)
			lp.flush(context.WithoutCancel(ctx))
			return nil
		case <-lp.sig.arrive:
		case <-lp.sig.freed:
			// Released slots: a class held by the in-flight bound may go
			// now; otherwise the store hears of them, and of the
			// upstream's reports, with the next call, or after releaseDelay.
			tokens := lp.sig.tokensFreed.Swap(false)
			all := lp.sig.reconfigured.Swap(false)
			for c, b := range st.blocked {
				if all || b == store.BlockedByInFlight || (tokens && b == store.BlockedByWindow) {
					st.blocked[c] = store.NotBlocked
				}
			}
			if !st.pending {
				st.pending = true
				d := releaseDelay
				if st.pf.spare != (store.PerClass{}) {
					d = lazyReleaseDelay
				}
				st.releases.Reset(d)
			}
		case <-st.releases.C:
			force = st.pending
			// A fresher report may have lifted an upstream hold.
			for c, b := range st.blocked {
				if b == store.BlockedByUpstream {
					st.blocked[c] = store.NotBlocked
				}
			}
		case <-st.timer.C:
			st.armed = time.Time{}
			st.blocked = [classify.NumClasses]store.Blocker{}
			force = lp.queue.expireCredits(time.Now()) // the store must hear they are back
		case <-st.beat.C:
			force = true // a heartbeat since the last call: keepAlive armed it
		}
		lp.round(ctx, st, force)
	}
}

// round calls the store until every class is served or blocked.
func (lp *admissionLoop) round(ctx context.Context, st *loopState, force bool) {
	for {
		req := lp.ask(st)
		want := req.Want
		if want == (store.PerClass{}) && !force {
			return
		}
		force = false
		now := time.Now()
		if lp.prefetch {
			lp.queue.expireCredits(now)
			admitted := lp.queue.admissions()
			st.pf.updateRate(now, &admitted)
		}
		lims := lp.limits.Load()
		req.Pool, req.Upstream = lp.pool, lp.pending.take(now)
		req.InFlight, req.Credits = lp.queue.occupied()
		req.Limits, req.LocalLimits = lims.enforced, lims.local
		req.Corrections, req.Output = lp.leases.owed()
		res, err := lp.store.Take(ctx, req)
		st.lastCall = time.Now()
		if lp.onStoreCall != nil {
			lp.onStoreCall(st.lastCall.Sub(now), err)
		}
		st.pending = false // the call carried every release and report so far
		if err != nil {
			lp.pending.restore(req.Upstream, now)
			lp.leases.restore(req.Corrections, req.Output)
			lp.storeFailed(ctx, st, err)
			lp.keepAlive(st)
			return
		}
		lp.last.set(req, res)
		lp.keepAlive(st)
		lp.leases.adapt.noteAnswer(want, res, req.Limits.InFlight)
		lp.queue.hand(req, res, &st.call, st.pf.spare, now)
		lp.plan(&st.pf, res, lims.enforced)
		more := false
		for c := range want {
			if res.Granted[c] < want[c] {
				st.blocked[c] = res.Blocker[c]
			} else if lp.queue.queued(classify.Class(c)) > 0 {
				more = true // arrived during the call
			}
		}
		if res.RetryAfter > 0 {
			st.arm(max(res.RetryAfter, time.Millisecond))
		}
		if until := lp.queue.creditDeadline(); !until.IsZero() {
			st.arm(max(time.Until(until), time.Millisecond))
		}
		if !more {
			return
		}
	}
}

// ask builds the next call. Per class, every waiter of a class that is
// not blocked is asked for, with spare credits on top (prefetch.go); when
// tokens are enforced, they are listed in the order grants go to them (at
// most maxBatch), spares last.
func (lp *admissionLoop) ask(st *loopState) store.TakeRequest {
	var req store.TakeRequest
	tokens := lp.limits.Load().enforced.AccountTPM > 0
	var open [classify.NumClasses]bool
	for c := range open {
		open[c] = st.blocked[c] == store.NotBlocked
	}
	call := &st.call
	s := lp.queue.list(call, open, tokens)
	for c := range req.Want {
		if !open[c] {
			continue
		}
		// Top the credits up when a waiter calls anyway, or when they
		// ran low while requests kept coming; not on every wake-up.
		spare := int64(0)
		if n := s.admitted[c]; call.waiting[c] > 0 || (n != st.pf.seen[c] && s.low[c]) {
			st.pf.seen[c] = n
			spare = max(0, st.pf.spare[c]-s.credits[c]) // 0 while tokens are enforced (plan)
		}
		req.Want[c] = call.waiting[c] + spare
		if tokens {
			for range spare {
				call.waiters[c] = append(call.waiters[c], store.Queued{}) // for anyone
				call.listed[c] = append(call.listed[c], nil)
			}
			req.Waiters[c] = call.waiters[c]
		}
	}
	return req
}

// storeFailed handles a failed Take: under on_error "closed" every waiter
// is refused at once; otherwise the loop tries again shortly.
func (lp *admissionLoop) storeFailed(ctx context.Context, st *loopState, err error) {
	if errors.Is(err, store.ErrStoreUnavailable) {
		lp.queue.refuseAll(store.ErrStoreUnavailable)
	} else if ctx.Err() == nil {
		lp.log.Warn("store_take_failed", slog.String("error", err.Error()))
	}
	lp.queue.dropCredits(classify.Classes[:]...)
	st.blocked = [classify.NumClasses]store.Blocker{store.BlockedByWindow, store.BlockedByWindow}
	st.arm(store.Retry)
}

// keepAlive arms the heartbeat a heartbeat after a store call while the
// pool is live: this replica holds slots or credits in it, or has waiters,
// or the store's last answer showed other replicas' requests in flight or
// bulk held on the upstream's word. Slots must not expire while held, and
// while any replica holds any, every replica's calls reap the ones whose
// replica died (take.lua's reapDead). Otherwise the pool stays silent
// until its next request or release, so an idle replica's store calls do
// not grow with its pools: what it held expired with nothing in it, and
// its first call reaps and counts before it grants. Its fleet figures for
// the pool (in flight, hold) stay as the last answer gave them: nothing.
func (lp *admissionLoop) keepAlive(st *loopState) {
	if lp.heartbeat <= 0 {
		return
	}
	if !lp.live() {
		st.beat.Stop()
		return
	}
	st.beat.Reset(lp.heartbeat)
}

// live reports whether the pool has anything the store must keep hearing
// of (keepAlive).
func (lp *admissionLoop) live() bool {
	held, _ := lp.queue.occupied() // credits included
	for _, c := range classify.Classes {
		if held[c] > 0 || lp.queue.queued(c) > 0 || lp.last.others[c].Load() > 0 {
			return true
		}
	}
	return lp.last.upstreamHold.Load() > 0
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

// flush tells the store what this replica still holds when the limiter
// stops, so a shared store does not wait for the heartbeat to expire.
func (lp *admissionLoop) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req := store.TakeRequest{Pool: lp.pool}
	req.InFlight, req.Credits = lp.queue.occupied()
	if _, err := lp.store.Take(ctx, req); err != nil {
		lp.log.Warn("store_flush_failed", slog.String("error", err.Error()))
	}
}
