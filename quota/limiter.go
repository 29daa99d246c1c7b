package quota

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// limiter admits requests to one pool against a store. Each class has a
// queue in its fairness's order (by caller, or by arrival); one admission
// loop serves both, asking the store for as many grants as there are
// waiters, both classes and every release in one call.
// It is safe for concurrent use. Admit may be called before Run starts;
// waiters are served once it does.
type limiter struct {
	store store
	// pool is the pool the limiter admits to (pool.go); set before Run.
	pool string
	log  *slog.Logger
	// limits are what the store enforces and the per-replica fallback;
	// replaced whole by Reconfigure.
	limits atomic.Pointer[limitSet]
	// heartbeat is the longest the loop stays silent towards the store; 0
	// means it only calls when there is something to ask or release.
	heartbeat time.Duration

	mu      sync.Mutex
	classes [classify.NumClasses]classQueue
	closed  bool
	// closeErr is what Admit answers once closed.
	closeErr error
	// weights are the callers' fair-queuing weights, by name (1 if absent).
	weights map[string]float64
	// credits are grants taken ahead of demand; guarded by mu.
	credits credits
	// prefetch, set before Run, lets the loop take credits.
	prefetch bool
	// admitted counts admissions, for the loop's rate estimate.
	admitted [classify.NumClasses]atomic.Int64

	// inFlight counts this replica's leases not yet released, by class.
	inFlight [classify.NumClasses]atomic.Int64
	// last is the store's last answer: the fleet's in flight, the hold,
	// the window's use.
	last lastAnswer
	// corrections are token corrections not yet sent to the store.
	corrections [classify.NumClasses]atomic.Int64
	// output is output tokens reported and not yet sent to the store.
	output atomic.Int64
	// tokensFreed says a correction gave tokens back since the loop looked.
	tokensFreed atomic.Bool
	// reconfigured says the limits changed since the loop looked: whatever
	// blocked a class may not any more.
	reconfigured atomic.Bool

	arrive chan struct{} // a waiter joined a queue
	freed  chan struct{} // a lease was released, or the upstream reported

	// pending is what the upstream said since the last store call.
	pending pendingReport

	// onStoreCall, when set (before Run), observes every store call.
	onStoreCall func(d time.Duration, err error)
}

// OnStoreCall sets f to observe every store call's duration and error, for
// metrics. Call it before Run.
func (l *limiter) OnStoreCall(f func(d time.Duration, err error)) { l.onStoreCall = f }

// classQueue is one class's queue and limits; guarded by limiter.mu.
type classQueue struct {
	q        queue
	maxWait  time.Duration
	maxQueue int
	// shortfalls counts store calls that left this class's waiters queued;
	// a waiter that saw one (joined before it, or while short) was held.
	shortfalls uint64
	short      bool
	// fair shares the class between callers (fair.go).
	fair fairShare
}

// newLimiter returns a limiter for cfg's classes over store; limits are the ones the store enforces, used to estimate
// Retry-After. heartbeat is how often the loop calls the store when idle
// (0: never), so a shared store knows the replica is alive.
func newLimiter(cfg Config, limits Limits, store store, heartbeat time.Duration, log *slog.Logger) *limiter {
	l := &limiter{store: store, log: log, heartbeat: heartbeat,
		arrive: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
	l.Reconfigure(cfg, limits)
	return l
}

// limitSet is one configuration's limits.
type limitSet struct {
	enforced, local Limits
}

// Reconfigure applies a new configuration's classes and limits (what the
// store enforces; the per-replica fallback is derived from cfg). Waiting
// and admitted requests keep their place and their slot: the new queue
// bounds and max_wait apply to requests that arrive from now on, the new
// limits from the store's next call. Safe to call while serving.
func (l *limiter) Reconfigure(cfg Config, limits Limits) {
	l.limits.Store(&limitSet{enforced: limits, local: cfg.PerReplica()})
	ic, bc := cfg.Classes.Interactive, cfg.Classes.Bulk
	l.mu.Lock()
	l.dropCreditsLocked(classify.Classes[:]...) // taken under the old limits
	l.classes[classify.Interactive].maxWait, l.classes[classify.Interactive].maxQueue = ic.MaxWait, ic.MaxQueue
	l.classes[classify.Bulk].maxWait, l.classes[classify.Bulk].maxQueue = bc.MaxWait, bc.MaxQueue
	l.classes[classify.Interactive].fair.on = ic.Fairness != FairFIFO
	l.classes[classify.Bulk].fair.on = bc.Fairness != FairFIFO
	l.mu.Unlock()
	l.reconfigured.Store(true)
	notify(l.freed) // a waiter blocked under the old limits may go now
}

// Admit waits until req may go upstream and returns its Lease, which the
// caller must Release when the upstream exchange ends. req.Tokens, the
// charge Admitter.Admit decided (0 where the pool does not enforce
// tokens), is charged to the class's token window, and Lease.Correct
// settles it. It returns a *RefusedError when the queue is full or
// max_wait passes, ErrStoreUnavailable when the store failed under
// on_error "closed", ErrClosed after Run has stopped, or the context's
// error if ctx ends first.
func (l *limiter) Admit(ctx context.Context, req Request) (*Lease, error) {
	c := req.Class
	cq := &l.classes[c]
	l.mu.Lock()
	maxWait := cq.maxWait
	if !req.until.IsZero() {
		maxWait = min(maxWait, max(0, time.Until(req.until)))
	}
	if l.closed {
		err := l.closeErr
		l.mu.Unlock()
		return nil, err
	}
	if l.prefetch && l.takeCreditLocked(c, time.Now()) {
		l.mu.Unlock()
		l.admitted[c].Add(1)
		return &Lease{l: l, class: c}, nil
	}
	if n := cq.q.n; n >= cq.maxQueue {
		l.mu.Unlock()
		return nil, &RefusedError{Class: c, Reason: ErrQueueFull, RetryAfter: l.retryAfter(c, n)}
	}
	w := &waiter{done: make(chan struct{}), cost: max(0, req.Tokens)}
	weight := l.weightOfLocked(req.Caller)
	w.flow, w.span = cq.fair.flowOf(req.Caller, req.Anonymous), 1/weight
	if w.cost > 0 {
		// service counted in what the pool limits: tokens (Config.charge
		// left a cost only where the pool enforces them)
		w.span, w.weight = float64(w.cost)/weight, weight
	}
	w.gen, w.held = cq.shortfalls, cq.short
	l.enqueueLocked(c, w)
	l.mu.Unlock()
	notify(l.arrive)

	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	var cause error
	select {
	case <-w.done:
		if w.err != nil {
			return nil, w.err
		}
		return w.lease(l, c), nil
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-timer.C:
		cause = ErrWaitTimeout
	}
	return l.leave(c, w, cause)
}

// leave takes w out of its queue after it gave up. A grant that raced the
// timeout is kept; one that raced a cancellation is handed back.
func (l *limiter) leave(c classify.Class, w *waiter, cause error) (*Lease, error) {
	l.mu.Lock()
	granted, werr := w.granted, w.err
	l.dequeueLocked(c, w)
	ahead := l.classes[c].q.n
	l.mu.Unlock()
	timedOut := errors.Is(cause, ErrWaitTimeout)
	switch {
	case granted && timedOut:
		return w.lease(l, c), nil
	case granted:
		lease := w.lease(l, c)
		lease.Correct(0) // it never went: its tokens are given back
		lease.Release()
		return nil, cause
	case werr != nil:
		return nil, werr
	case timedOut:
		return nil, &RefusedError{Class: c, Reason: ErrWaitTimeout, RetryAfter: l.retryAfter(c, ahead)}
	default:
		return nil, cause
	}
}

// enqueueLocked adds w to class c's queue.
func (l *limiter) enqueueLocked(c classify.Class, w *waiter) {
	cq := &l.classes[c]
	w.tagged = cq.fair.on
	if w.tagged {
		cq.fair.enqueue(&cq.q, w)
	} else {
		w.tag = 0
		cq.q.push(w)
	}
}

// dequeueLocked takes w out of class c's queue, if it is still in it.
func (l *limiter) dequeueLocked(c classify.Class, w *waiter) {
	if !w.queued {
		return
	}
	cq := &l.classes[c]
	if w.tagged {
		cq.fair.dequeue(&cq.q, w)
	} else {
		cq.q.remove(w)
	}
}

// InFlightLimit returns the in-flight bound the store enforces now (the
// fleet's with a shared store), as of the last Reconfigure.
func (l *limiter) InFlightLimit() int64 { return l.limits.Load().enforced.InFlight }

// Queued returns how many requests of class c are waiting.
func (l *limiter) Queued(c classify.Class) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.classes[c].q.n
}

// InFlight returns how many leases of class c this replica holds.
func (l *limiter) InFlight(c classify.Class) int64 { return l.inFlight[c].Load() }

// FleetInFlight returns the requests of class c in flight across the
// fleet: this replica's own now, and the others' as they last told the
// store — slots taken ahead of demand (credits) left out on both sides.
func (l *limiter) FleetInFlight(c classify.Class) int64 {
	return l.last.others[c].Load() + l.inFlight[c].Load()
}

// Lease is one admitted request's claim on an in-flight slot.
type Lease struct {
	l        *limiter
	class    classify.Class
	held     bool
	cost     int64
	released atomic.Bool
	settled  atomic.Bool
	// gate is its pass through its caller's gates (admitThrough),
	// released with it.
	gate gatePass
	// flow and weight are its fair-queuing flow and its caller's weight
	// when its service was counted in tokens (weight 0 otherwise), so
	// Correct can settle the flow's service too.
	flow   flowKey
	weight float64
}

// Correct settles the token charge with what the request really cost:
// the difference to the estimate is added to the current window. 0 gives
// the whole charge back (an answer the provider refused spent nothing).
// A cost more than a minute's allowance above the estimate counts as that
// much: the carry into later seconds is bounded by a minute all the same
// (window.next), and so no sum of corrections can overflow. Calls after
// the first do nothing; in a pool without tokens_per_minute it does
// nothing.
func (s *Lease) Correct(tokens int64) {
	tpm := s.l.limits.Load().enforced.AccountTPM
	if tpm <= 0 || !s.settled.CompareAndSwap(false, true) {
		return
	}
	if d := min(max(tokens, 0)-s.cost, tpm); d != 0 {
		if s.weight > 0 {
			s.l.mu.Lock()
			s.l.classes[s.class].fair.correct(s.flow, float64(d)/s.weight)
			s.l.mu.Unlock()
		}
		s.l.corrections[s.class].Add(d)
		if d < 0 {
			s.l.tokensFreed.Store(true) // room in this window for those waiting on tokens
		}
		notify(s.l.freed)
	}
}

// Spent records the output tokens the request's response reported, for
// account.output_tokens_per_minute; the store hears of them with the next
// call. Past two minutes of the budget, more changes nothing (its debt is
// bounded at a minute), so a report is counted at most that. Without that
// budget it does nothing.
func (s *Lease) Spent(output int64) {
	if otpm := s.l.limits.Load().enforced.OutputTPM; output > 0 && otpm > 0 {
		s.l.output.Add(min(output, 2*otpm))
	}
}

// Held reports whether the request had to wait for a later window or a
// released slot (its caller's gates' included) before it was admitted.
func (s *Lease) Held() bool { return s.held || s.gate.held }

// Release returns the slot. It never blocks on the store: the admission
// loop tells the store on its next call. Calls after the first do nothing.
func (s *Lease) Release() {
	if s.released.CompareAndSwap(false, true) {
		s.gate.Release()
		s.l.inFlight[s.class].Add(-1)
		notify(s.l.freed)
	}
}

// Observe records what the upstream's headers said at at: bulk must be held
// for hold after at because the account is below the interactive reserve
// (0: it is above, lifting an older hold), and for throttle after at
// because the upstream answered 429 with that retry hint (0: none). The
// freshest observation wins (upstreamState.merge). Observe never blocks:
// the store hears of it on the admission loop's next call, within a few
// milliseconds.
func (l *limiter) Observe(at time.Time, hold, throttle time.Duration) {
	var throttleUntil time.Time
	if throttle > 0 {
		throttleUntil = at.Add(throttle)
	}
	l.pending.add(at, hold, throttleUntil)
	if hold > 0 || throttle > 0 {
		l.mu.Lock()
		l.dropCreditsLocked(classify.Bulk)
		l.mu.Unlock()
	}
	notify(l.freed)
}

// Window returns the current window's use as of the store's last answer.
func (l *limiter) Window() WindowUse {
	if w := l.last.window.Load(); w != nil {
		return *w
	}
	return WindowUse{}
}

// UpstreamHold returns how much longer bulk is held on the upstream's word,
// as of the store's last answer.
func (l *limiter) UpstreamHold() time.Duration { return time.Duration(l.last.upstreamHold.Load()) }

// occupied is the slots this replica holds in flight, for the store, and
// how many of them are credits. Credits count: the store granted them and
// counts them in flight, apart, so the fleet's count can leave them out.
func (l *limiter) occupied() (occupied, credits PerClass) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range occupied {
		credits[c] = l.credits.n[c]
		occupied[c] = l.inFlight[c].Load() + credits[c]
	}
	return occupied, credits
}

// retryAfter estimates when a request behind ahead others of class c may be
// admitted, at least a second and at most an hour.
func (l *limiter) retryAfter(c classify.Class, ahead int) time.Duration {
	lim := l.limits.Load().enforced
	rpm := lim.AccountRPM
	if c == classify.Bulk {
		rpm = lim.BulkRPM
		if lim.Borrow {
			rpm = lim.AccountRPM - lim.ReserveRPM
		}
	}
	return retryAfterAt(perSecond(rpm), ahead)
}

// retryAfterAt is when a request behind ahead others may go at rate a
// second, at least a second and at most an hour.
func retryAfterAt(rate float64, ahead int) time.Duration {
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

// setWeights sets the callers' fair-queuing weights (callers[].weight):
// requests that arrive from now on are tagged with them.
func (l *limiter) setWeights(weights map[string]float64) {
	l.mu.Lock()
	l.weights = weights
	l.mu.Unlock()
}

// weightOfLocked is caller's weight: 1 unless configured.
func (l *limiter) weightOfLocked(caller string) float64 {
	if w := l.weights[caller]; w > 0 {
		return w
	}
	return 1
}

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
