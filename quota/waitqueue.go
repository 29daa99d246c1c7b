package quota

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// waitQueue is everything a limiter's admissions change under one lock:
// both classes' queues of waiters in their order, the credits taken ahead
// of demand, the callers' weights, and whether it is closed. Its methods
// are the only code that takes mu, and what it holds (classQueue, credits,
// the waiters queued) is guarded by mu by being held here; the methods
// named …Locked expect mu held. Admit joins and leaves it; the admission
// loop lists it for a store call and hands the grants to it (hand.go).
type waitQueue struct {
	mu      sync.Mutex
	classes [classify.NumClasses]classQueue
	// closeErr is what join answers once closed; nil while open.
	closeErr error
	// weights are the callers' fair-queuing weights, by name (1 if absent).
	weights map[string]float64
	// credits are grants taken ahead of demand (prefetch.go).
	credits credits
	// admitted counts admissions, for the loop's rate estimate; the loop
	// reads it without mu.
	admitted [classify.NumClasses]atomic.Int64
	// leases count the admitted in flight; limits (the limiter's) estimate
	// Retry-After; sig wakes the loop.
	leases *ledger
	limits *atomic.Pointer[limitSet]
	sig    *signals
}

// classQueue is one class's queue and limits, held by a waitQueue.
type classQueue struct {
	q        queue
	maxWait  time.Duration
	maxQueue int
	// shortfalls counts store calls that left this class's waiters queued;
	// a waiter that saw one (joined before it, or while short) was held.
	shortfalls uint64
	short      bool
	// blocked is what stopped the last store call that left waiters
	// queued (Wait.HeldBy).
	blocked store.Blocker
	// fair shares the class between callers (fair.go).
	fair fairShare
}

// reconfigure applies cfg's queue bounds, max_wait and fairness to
// requests that arrive from now on, and drops the credits (taken under the
// old limits).
func (q *waitQueue) reconfigure(cfg Config) {
	ic, bc := cfg.Classes.Interactive, cfg.Classes.Bulk
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropCreditsLocked(classify.Classes[:]...)
	q.classes[classify.Interactive].maxWait, q.classes[classify.Interactive].maxQueue = ic.MaxWait, ic.MaxQueue
	q.classes[classify.Bulk].maxWait, q.classes[classify.Bulk].maxQueue = bc.MaxWait, bc.MaxQueue
	q.classes[classify.Interactive].fair.on = ic.Fairness != fairFIFO
	q.classes[classify.Bulk].fair.on = bc.Fairness != fairFIFO
}

// setWeights sets the callers' fair-queuing weights (callers[].weight):
// requests that arrive from now on are tagged with them.
func (q *waitQueue) setWeights(weights map[string]float64) {
	q.mu.Lock()
	q.weights = weights
	q.mu.Unlock()
}

// join queues a waiter for req and returns it with how long it may wait.
// With credit (prefetch on) a request nobody of its class waits ahead of
// is admitted from the credits at once instead: w is nil, err too. It
// refuses with a *gate.RefusedError when the class's queue is full, and with
// the close error once closed.
func (q *waitQueue) join(req Request, credit bool) (w *waiter, maxWait time.Duration, err error) {
	c := req.Class
	cq := &q.classes[c]
	q.mu.Lock()
	maxWait = cq.maxWait
	if !req.until.IsZero() {
		maxWait = min(maxWait, max(0, time.Until(req.until)))
	}
	if err := q.closeErr; err != nil {
		q.mu.Unlock()
		return nil, 0, err
	}
	if credit && q.takeCreditLocked(c, time.Now()) {
		q.mu.Unlock()
		q.admitted[c].Add(1)
		return nil, 0, nil
	}
	if n := cq.q.n; n >= cq.maxQueue {
		q.mu.Unlock()
		return nil, 0, &gate.RefusedError{Class: c, Reason: gate.ErrQueueFull, RetryAfter: q.limits.Load().retryAfter(c, n)}
	}
	w = &waiter{done: make(chan struct{}), cost: max(0, req.Tokens)}
	weight := q.weightOfLocked(req.Caller)
	w.flow, w.span = cq.fair.flowOf(req.Caller, req.Anonymous), 1/weight
	if w.cost > 0 {
		// service counted in what the pool limits: tokens (Config.charge
		// left a cost only where the pool enforces them)
		w.span, w.weight = float64(w.cost)/weight, weight
	}
	w.gen, w.held = cq.shortfalls, cq.short
	w.wait.Queued = cq.q.n
	if w.held {
		w.wait.HeldBy = heldBy(cq.blocked)
	}
	cq.enqueue(w)
	q.mu.Unlock()
	store.Notify(q.sig.arrive)
	return w, maxWait, nil
}

// leave takes w, of class c, out of its queue after it gave up, and
// returns whether it was granted meanwhile, how many of its class wait,
// and why it was refused, if it was meanwhile; w.wait says what held it.
func (q *waitQueue) leave(c classify.Class, w *waiter) (granted bool, ahead int, refused error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	granted, refused = w.granted, w.err
	cq := &q.classes[c]
	cq.dequeue(w)
	if !granted && w.gen != cq.shortfalls {
		w.wait.HeldBy = heldBy(cq.blocked)
	}
	return granted, cq.q.n, refused
}

// enqueue adds w to the queue, in its fair order when the class is fair.
func (cq *classQueue) enqueue(w *waiter) {
	w.tagged = cq.fair.on
	if w.tagged {
		cq.fair.enqueue(&cq.q, w)
	} else {
		w.tag = 0
		cq.q.push(w)
	}
}

// dequeue takes w out of the queue, if it is still in it.
func (cq *classQueue) dequeue(w *waiter) {
	if !w.queued {
		return
	}
	if w.tagged {
		cq.fair.dequeue(&cq.q, w)
	} else {
		cq.q.remove(w)
	}
}

// queued returns how many requests of class c are waiting.
func (q *waitQueue) queued(c classify.Class) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.classes[c].q.n
}

// admissions counts the admissions so far, per class, without the lock.
func (q *waitQueue) admissions() (n [classify.NumClasses]int64) {
	for c := range n {
		n[c] = q.admitted[c].Load()
	}
	return n
}

// correctFlow moves flow's fair-queuing service in class c by delta
// (Lease.Settle).
func (q *waitQueue) correctFlow(c classify.Class, flow flowKey, delta float64) {
	q.mu.Lock()
	q.classes[c].fair.correct(flow, delta)
	q.mu.Unlock()
}

// occupied is the slots this replica holds in flight, for the store, and
// how many of them are credits. Credits count: the store granted them and
// counts them in flight, apart, so the fleet's count can leave them out.
func (q *waitQueue) occupied() (occupied, credits store.PerClass) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for c := range occupied {
		credits[c] = q.credits.n[c]
		occupied[c] = q.leases.inFlight[c].Load() + credits[c]
	}
	return occupied, credits
}

// refuseAll ends every waiter with err.
func (q *waitQueue) refuseAll(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for c := range q.classes {
		cq := &q.classes[c]
		for w := cq.q.head; w != nil; w = cq.q.head {
			cq.dequeue(w)
			w.err = err
			close(w.done)
		}
	}
}

// close refuses every waiter and every later join with err; the first
// call decides the error.
func (q *waitQueue) close(err error) {
	q.mu.Lock()
	if q.closeErr != nil {
		q.mu.Unlock()
		return
	}
	q.closeErr = err
	q.dropCreditsLocked(classify.Classes[:]...)
	q.mu.Unlock()
	q.refuseAll(err)
}

// weightOfLocked is caller's weight: 1 unless configured.
func (q *waitQueue) weightOfLocked(caller string) float64 {
	if w := q.weights[caller]; w > 0 {
		return w
	}
	return 1
}

// takeCreditLocked admits a request of class c from the credits, if any
// are valid and nobody of its class waits.
func (q *waitQueue) takeCreditLocked(c classify.Class, now time.Time) bool {
	if q.classes[c].q.n > 0 {
		return false // a newcomer never passes a waiter
	}
	took, dropped := q.credits.take(c, now)
	if dropped {
		store.Notify(q.sig.freed)
	}
	if !took {
		return false
	}
	q.leases.admit(c)
	if q.credits.low(c) {
		store.Notify(q.sig.arrive) // refill before they run out
	}
	return true
}

// dropCredits gives up the credits of classes (a hold, a failure); the
// store hears they are back with the loop's next call.
func (q *waitQueue) dropCredits(classes ...classify.Class) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropCreditsLocked(classes...)
}

// dropCreditsLocked is dropCredits with mu held.
func (q *waitQueue) dropCreditsLocked(classes ...classify.Class) {
	if q.credits.drop(classes...) {
		store.Notify(q.sig.freed)
	}
}

// expireCredits drops credits whose second has passed at now; it reports
// whether there were any, so the store hears of it.
func (q *waitQueue) expireCredits(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.credits.expire(now)
}

// creditDeadline is when the credits expire; zero when there are none.
func (q *waitQueue) creditDeadline() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.credits.deadline()
}

// setRefill sets, per class, the credits left at which a spend asks the
// loop to refill: a quarter of spare. It takes no lock (atomics).
func (q *waitQueue) setRefill(spare [classify.NumClasses]int64) {
	for c := range spare {
		q.credits.refillAt[c].Store(spare[c] / 4)
	}
}
