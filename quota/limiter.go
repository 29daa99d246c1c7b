package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// limiter admits requests to one pool against a store. Each class has a
// queue in its fairness's order (by caller, or by arrival); one admission
// loop serves both, asking the store for as many grants as there are
// waiters, both classes and every release in one call.
// It is safe for concurrent use. Admit may be called before Run starts;
// waiters are served once it does.
//
// It is the composition of parts that each own their state: the wait
// queue (waitQueue: the queues, the credits, their lock), the leases'
// ledger (ledger: in flight, settlements owed), the signals that wake the
// loop, and the loop (admissionLoop: the store, its last answer); each
// reaches the others only through the pointers newLimiter wires.
type limiter struct {
	// limits are what the store enforces and the per-replica fallback;
	// replaced whole by Reconfigure.
	limits atomic.Pointer[limitSet]
	// limitsMu orders the two writers of limits: Reconfigure and a new
	// adaptive bound (setBound). Never taken on the request path.
	limitsMu sync.Mutex
	// adapt steps the pool's adaptive bound, when it has one.
	adapt  adaptiveRun
	queue  waitQueue
	leases ledger
	sig    signals
	loop   admissionLoop
	// timers time the waits (Admit), reused.
	timers timerPool
}

// timerPool reuses the timers of waits for admission, one per request
// waiting at most. Safe for concurrent use.
type timerPool struct{ pool sync.Pool }

// get returns a timer that fires after d.
func (p *timerPool) get(d time.Duration) *time.Timer {
	if t, ok := p.pool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// put stops t and keeps it for another wait: once stopped, its channel
// holds no stale tick (Go 1.23's timers).
func (p *timerPool) put(t *time.Timer) {
	t.Stop()
	p.pool.Put(t)
}

// OnStoreCall sets f to observe every store call's duration and error, for
// metrics. Call it before Run.
func (l *limiter) OnStoreCall(f func(d time.Duration, err error)) { l.loop.onStoreCall = f }

// enablePrefetch lets the limiter take credits ahead of demand. Call it
// before Run; it pays only with a store that costs a round trip (Redis).
func (l *limiter) enablePrefetch() { l.loop.prefetch = true }

// newLimiter returns a limiter for cfg's classes over store; limits are the ones the store enforces, used to estimate
// Retry-After. heartbeat is how often the loop calls the store when idle
// (0: never), so a shared store knows the replica is alive.
func newLimiter(cfg Config, limits store.Limits, store store.Store, heartbeat time.Duration, log *slog.Logger) *limiter {
	l := &limiter{}
	l.sig.arrive, l.sig.freed = make(chan struct{}, 1), make(chan struct{}, 1)
	l.leases.limits, l.leases.sig, l.leases.settleFlow = &l.limits, &l.sig, l.queue.correctFlow
	l.leases.now = time.Now
	l.queue.leases, l.queue.limits, l.queue.sig = &l.leases, &l.limits, &l.sig
	l.adapt.ledger, l.adapt.limits, l.adapt.setBound, l.adapt.log = &l.leases.adapt, &l.limits, l.setBound, log
	l.adapt.now = func() time.Time { return l.leases.now() }
	l.adapt.turnedOn = make(chan struct{}, 1)
	lp := &l.loop
	lp.store, lp.log, lp.heartbeat = store, log, heartbeat
	lp.limits, lp.queue, lp.leases, lp.sig = &l.limits, &l.queue, &l.leases, &l.sig
	l.Reconfigure(cfg, limits)
	return l
}

// limitSet is one configuration's limits.
type limitSet struct {
	enforced, local store.Limits
	// ceiling is enforced.InFlight as configured (max_in_flight's), which
	// an adaptive bound never passes.
	ceiling int64
	// adaptive, when the pool has adaptive_in_flight, is the bound's floor
	// and ceiling: enforced.InFlight is then the bound in force (at), and
	// local.InFlight its share per replica. Nil otherwise.
	adaptive *adaptive.Limits
	classes  ClassesConfig
	replicas int64
}

// at is s under adaptive bound b (0: none yet, the floor), b clamped to
// the floor and the ceiling; s itself when the bound is not adaptive.
func (s *limitSet) at(b int64) *limitSet {
	if s.adaptive == nil {
		return s
	}
	b = int64(s.adaptive.Clamp(int(b)))
	n := *s
	n.enforced = s.classes.withInFlight(s.enforced, b)
	n.local = s.classes.withInFlight(s.local, max(1, b/max(1, s.replicas)))
	return &n
}

// Reconfigure applies a new configuration's classes and limits (what the
// store enforces; the per-replica fallback is derived from cfg). Waiting
// and admitted requests keep their place and their slot: the new queue
// bounds and max_wait apply to requests that arrive from now on, the new
// limits from the store's next call. Safe to call while serving.
func (l *limiter) Reconfigure(cfg Config, limits store.Limits) {
	l.limitsMu.Lock()
	was := l.limits.Load()
	set := &limitSet{enforced: limits, local: cfg.PerReplica(), ceiling: limits.InFlight,
		classes: cfg.Classes, replicas: cfg.Account.ExpectedReplicas}
	if cfg.Account.AdaptiveInFlight {
		set.adaptive = &adaptive.Limits{Floor: int(cfg.Account.MinInFlight), Ceiling: int(limits.InFlight),
			Bulk: adaptive.BulkPart{Share: cfg.Classes.Bulk.Share, Reserve: cfg.Classes.Interactive.Reserve, Borrow: cfg.Classes.Bulk.Borrow}}
	} else {
		l.adapt.bound.Store(0) // turned on again, it starts afresh
	}
	l.limits.Store(set.at(l.adapt.bound.Load()))
	l.limitsMu.Unlock()
	if set.adaptive != nil && was != nil && was.adaptive == nil && l.adapt.turnedOn != nil {
		store.Notify(l.adapt.turnedOn) // its run ticks at AdaptInterval from now
	}
	l.queue.reconfigure(cfg)
	l.sig.reconfigured.Store(true)
	store.Notify(l.sig.freed) // a waiter blocked under the old limits may go now
}

// Run serves the queues until ctx ends, then refuses every waiter with
// gate.ErrClosed and tells the store what is still in flight; with an
// store.AdaptStore, it steps the pool's adaptive bound meanwhile. Call it once.
func (l *limiter) Run(ctx context.Context) error {
	if l.adapt.store != nil {
		var wg sync.WaitGroup
		ctx, stop := context.WithCancel(ctx)
		defer wg.Wait()
		defer stop()
		wg.Go(func() { l.adapt.run(ctx) })
	}
	return l.loop.run(ctx)
}

// Admit waits until req may go upstream and returns its Lease, which the
// caller must Release when the upstream exchange ends. req.Tokens, the
// charge Admitter.Admit decided (0 where the pool does not enforce
// tokens), is charged to the class's token window, and Lease.Settle
// settles it. It returns a *gate.RefusedError when the queue is full or
// max_wait passes, store.ErrStoreUnavailable when the store failed under
// on_error "closed", gate.ErrClosed after Run has stopped, or the context's
// error if ctx ends first.
func (l *limiter) Admit(ctx context.Context, req Request) (*Lease, error) {
	c := req.Class
	w, maxWait, err := l.queue.join(req, l.loop.prefetch)
	switch {
	case err != nil:
		return nil, err
	case w == nil: // admitted from the credits
		return l.grant(&Lease{leases: &l.leases, class: c}), nil
	}
	timer := l.timers.get(maxWait)
	defer l.timers.put(timer)
	var cause error
	select {
	case <-w.done:
		if w.err != nil {
			return nil, w.err
		}
		return l.grant(w.lease(&l.leases, c)), nil
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = gate.ErrWaitTimeout
	}
	return l.leave(c, w, cause)
}

// grant stamps s with its grant time, from which its latency and its
// time in flight are counted.
func (l *limiter) grant(s *Lease) *Lease {
	s.granted = l.leases.now()
	l.leases.adapt.busy.begin(s.granted)
	return s
}

// leave takes w out of its queue after it gave up. A grant that raced the
// timeout is kept; one that raced a cancellation is handed back.
func (l *limiter) leave(c classify.Class, w *waiter, cause error) (*Lease, error) {
	granted, ahead, werr := l.queue.leave(c, w)
	timedOut := errors.Is(cause, gate.ErrWaitTimeout)
	switch {
	case granted && timedOut:
		return l.grant(w.lease(&l.leases, c)), nil
	case granted:
		l.handBack(w.lease(&l.leases, c)) // it never went: its grant goes on
		return nil, cause
	case werr != nil:
		return nil, werr
	case timedOut:
		return nil, &gate.RefusedError{Class: c, Reason: gate.ErrWaitTimeout, RetryAfter: l.limits.Load().retryAfter(c, ahead), Wait: w.wait}
	default:
		return nil, cause
	}
}

// handBack ends s, a grant its request never took — it was granted
// elsewhere first (admitFirst's let-go) or its client left as it was
// granted — and hands the grant to the oldest waiter of its class here,
// when one waits and bulk is not held: the window's request the store
// counted for s is not lost to the others waiting, as it was when s was
// only cancelled (a lender whose grants went to requests another account
// had granted the same moment lent a third of its room: both queues hand
// out grants oldest first, so their heads are the same requests). s's
// tokens are given back and the waiter's charged, its slot handed on.
func (l *limiter) handBack(s *Lease) {
	c := s.class
	held := c == classify.Bulk && (l.UpstreamHold() > 0 || l.loop.pending.holds(time.Now()))
	s.cancel()
	if !held {
		l.queue.handOne(c, l.limits.Load().enforced.AccountTPM > 0)
	}
}

// InFlightLimit returns the in-flight bound the store enforces now (the
// fleet's with a shared store): max_in_flight's as of the last
// Reconfigure, or the adaptive bound in force.
func (l *limiter) InFlightLimit() int64 { return l.limits.Load().enforced.InFlight }

// inFlightCeiling returns the most InFlightLimit may be: max_in_flight's
// bound, which an adaptive bound never passes.
func (l *limiter) inFlightCeiling() int64 { return l.limits.Load().ceiling }

// setBound puts adaptive bound b in force from the store's next call: the
// pool's in-flight limits (and its per-replica share for store.on_error
// local) become b's, partitioned as max_in_flight's are. It does nothing
// when the pool's bound is not adaptive.
func (l *limiter) setBound(b int64) {
	l.limitsMu.Lock()
	defer l.limitsMu.Unlock()
	cur := l.limits.Load()
	if cur.adaptive == nil {
		return
	}
	l.adapt.bound.Store(b)
	if cur.at(b).enforced.InFlight == cur.enforced.InFlight {
		return
	}
	l.limits.Store(cur.at(b))
	l.sig.reconfigured.Store(true) // a class blocked under the old bound may go now
	store.Notify(l.sig.freed)
}

// Queued returns how many requests of class c are waiting.
func (l *limiter) Queued(c classify.Class) int { return l.queue.queued(c) }

// InFlight returns how many leases of class c this replica holds.
func (l *limiter) InFlight(c classify.Class) int64 { return l.leases.inFlight[c].Load() }

// FleetInFlight returns the requests of class c in flight across the
// fleet: this replica's own now, and the others' as they last told the
// store — slots taken ahead of demand (credits) left out on both sides.
func (l *limiter) FleetInFlight(c classify.Class) int64 {
	return l.loop.last.others[c].Load() + l.leases.inFlight[c].Load()
}

// Observe records what the upstream's headers said at at: bulk must be held
// for hold after at because the account is below the interactive reserve
// (0: it is above, lifting an older hold), and for throttle after at
// because the upstream answered 429 with that retry hint (0: none). The
// freshest observation wins (store.UpstreamState.merge). Observe never blocks:
// the store hears of it on the admission loop's next call, within a few
// milliseconds.
func (l *limiter) Observe(at time.Time, hold, throttle time.Duration) {
	var throttleUntil time.Time
	if throttle > 0 {
		throttleUntil = at.Add(throttle)
	}
	l.loop.pending.add(at, hold, throttleUntil)
	if hold > 0 || throttle > 0 {
		l.queue.dropCredits(classify.Bulk)
	}
	store.Notify(l.sig.freed)
}

// Window returns the current window's use as of the store's last answer.
func (l *limiter) Window() store.WindowUse {
	if w := l.loop.last.window.Load(); w != nil {
		return *w
	}
	return store.WindowUse{}
}

// UpstreamHold returns how much longer bulk is held on the upstream's word,
// as of the store's last answer.
func (l *limiter) UpstreamHold() time.Duration { return time.Duration(l.loop.last.upstreamHold.Load()) }

// retryAfter estimates when a request behind ahead others of class c may be
// admitted, at least a second and at most an hour.
func (s *limitSet) retryAfter(c classify.Class, ahead int) time.Duration {
	lim := s.enforced
	rpm := lim.AccountRPM
	if c == classify.Bulk {
		rpm = lim.BulkRPM
		if lim.Borrow {
			rpm = lim.AccountRPM - lim.ReserveRPM
		}
	}
	return store.RetryAfterAt(store.PerSecond(rpm), ahead)
}

// setWeights sets the callers' fair-queuing weights (callers[].weight):
// requests that arrive from now on are tagged with them.
func (l *limiter) setWeights(weights map[string]float64) { l.queue.setWeights(weights) }

// closeWith refuses every waiter and every later Admit with err; the
// first call decides the error.
func (l *limiter) closeWith(err error) { l.queue.close(err) }

// weightsOf are the callers' configured weights, by name.
func weightsOf(callers []classify.Caller) map[string]float64 {
	w := map[string]float64{}
	for _, c := range callers {
		if c.Weight > 0 {
			w[c.Name] = c.Weight
		}
	}
	return w
}

// state is l's live numbers.
func (l *limiter) state() PoolState {
	st := PoolState{
		Window:              l.Window(),
		InFlight:            map[string]int64{},
		FleetInFlight:       map[string]int64{},
		Queued:              map[string]int{},
		InFlightLimit:       l.InFlightLimit(),
		UpstreamHoldSeconds: l.UpstreamHold().Seconds(),
	}
	if set := l.limits.Load(); set.adaptive != nil {
		view, _ := l.adapt.view()
		d := view.Last
		st.Adaptive = &adaptiveState{Bound: set.enforced.InFlight, Floor: int64(set.adaptive.Clamp(0)), Ceiling: set.ceiling,
			Phase: string(view.State.Phase), WorkPerSecond: view.Judged.Work, LatencySecondsPerWork: view.Judged.Latency,
			LastDecision: adaptiveDecision{Action: string(d.Action), From: int64(d.From), To: int64(d.To), Why: d.Why}}
	}
	for _, c := range classify.Classes {
		st.InFlight[c.String()] = l.InFlight(c)
		st.FleetInFlight[c.String()] = l.FleetInFlight(c)
		st.Queued[c.String()] = l.Queued(c)
	}
	return st
}
