package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// callList is one store call's waiters: list fills it for the store, hand
// gives the call's grants to the waiters it names. The admission loop
// owns it in between and reuses its buffers from call to call.
type callList struct {
	// waiters is, per class, the list the store decides on.
	waiters [classify.NumClasses][]store.Queued
	// listed are, per class, the waiters the list names, position for
	// position (nil for a spare): its grants go to them (hand).
	listed [classify.NumClasses][]*waiter
	// waiting is how many of the call's want were waiters, not spare,
	// and gen the credits' generation when it was made.
	waiting store.PerClass
	gen     uint64
}

// stock is what list found besides the waiters, under the same lock:
// admissions so far, credits held, and whether they are at the refill
// mark, per class.
type stock struct {
	admitted store.PerClass
	credits  store.PerClass
	low      [classify.NumClasses]bool
}

// list fills call for the classes open: how many wait and, with tokens
// enforced (byCost), the waiters in the order grants go to them (at most
// maxBatch); the spares are the loop's to add.
func (q *waitQueue) list(call *callList, open [classify.NumClasses]bool, byCost bool) (s stock) {
	q.mu.Lock()
	defer q.mu.Unlock()
	call.waiting = store.PerClass{}
	for c := range open {
		if !open[c] {
			continue
		}
		cq := &q.classes[c]
		if byCost {
			call.waiters[c], call.listed[c] = cq.list(call.waiters[c], call.listed[c])
			call.waiting[c] = int64(len(call.waiters[c]))
		} else {
			call.waiting[c] = int64(cq.q.n)
		}
		s.admitted[c] = q.admitted[c].Load()
		s.credits[c] = q.credits.n[c]
		s.low[c] = q.credits.low(classify.Class(c))
	}
	call.gen = q.credits.gen
	return s
}

// list lists the waiters in the order grants go to them (the queue's
// order), into buf for the store and who, position for position, for
// handing out the grants.
func (cq *classQueue) list(buf []store.Queued, who []*waiter) ([]store.Queued, []*waiter) {
	buf, who = buf[:0], who[:0]
	for w := cq.q.head; w != nil && len(buf) < store.MaxBatch; w = w.next {
		buf = append(buf, store.Queued{Cost: w.cost})
		who = append(who, w)
	}
	return buf, who
}

// hand gives each class's grants to its waiters: in a call that listed
// them (tokens enforced), to the waiters the list named
// (handListedLocked); else, where any waiter costs what another does (one
// request), to the oldest (handCountedLocked). Grants nobody is left to
// take become credits when the call asked for spare ones (spare; sent is
// when it was sent), and are released at once otherwise.
func (q *waitQueue) hand(req store.TakeRequest, res store.TakeResult, call *callList, spare store.PerClass, sent time.Time) {
	var excess store.PerClass
	q.mu.Lock()
	stale := call.gen != q.credits.gen // credits were dropped while the call was out
	if res.UpstreamHold > 0 {
		q.dropCreditsLocked(classify.Bulk) // the store holds bulk now; InFlight tells it on the next call
	}
	for c := range res.Granted {
		cls, cq := classify.Class(c), &q.classes[c]
		var given int64
		if req.Waiters[c] != nil {
			// Spare grants predate a drop of the credits (stale), and with
			// tokens enforced were charged nothing: then none to newcomers.
			given = q.handListedLocked(cls, call.listed[c], res.Granted[c], !stale && req.Limits.AccountTPM <= 0)
			clear(call.listed[c]) // keep no waiter alive past the call
		} else {
			limit := res.Granted[c]
			if stale {
				limit = min(limit, call.waiting[c]) // spare grants predate the drop: none to newcomers
			}
			given = q.handCountedLocked(cls, limit)
		}
		short := res.Granted[c] < req.Want[c]
		if short {
			cq.shortfalls++
			cq.blocked = res.Blocker[c]
		}
		cq.short = short && cq.q.n > 0
		q.admitted[c].Add(given)
		excess[c] = res.Granted[c] - given
		bulkHeld := c == int(classify.Bulk) && res.UpstreamHold > 0
		if excess[c] > 0 && spare[c] > 0 && !stale && !bulkHeld {
			// The store charged them to the second it decided in, which
			// ends SecondLeft after it decided, no sooner than sent+SecondLeft.
			q.credits.grant(cls, excess[c], sent.Add(res.SecondLeft))
			excess[c] = 0
		}
	}
	q.mu.Unlock()
	if excess != (store.PerClass{}) {
		store.Notify(q.sig.freed) // the store counted them; the next call hands them back
	}
}

// handListedLocked gives class c's n grants to the waiters the call
// listed — who, position for position, nil for a spare — in the list's
// order. So each grant goes to the waiter it was charged for, never to
// one that joined the queue ahead of it while the call was out (a
// 100,000-token newcomer once took a 500-token waiter's grant). A listed
// waiter that has left since (cancelled, timed out) is admitted nothing:
// the tokens charged for it are given back, and its grant, like a
// spare's, is excess. With toNewcomers, spare grants go to waiters that
// joined during the call. It returns how many it admitted.
func (q *waitQueue) handListedLocked(c classify.Class, who []*waiter, n int64, toNewcomers bool) (given int64) {
	var spares int64
	for _, w := range who[:min(int64(len(who)), n)] {
		switch {
		case w == nil:
			spares++
		case !w.queued: // it left while the call was out
			if w.cost > 0 {
				q.leases.giveBack(c, w.cost)
			}
		default:
			q.admitLocked(c, w)
			given++
		}
	}
	if toNewcomers {
		given += q.handCountedLocked(c, spares)
	}
	return given
}

// handOne admits class c's oldest waiter, if one waits, on a grant
// handed back (limiter.handBack); with tokens its cost is charged to the
// window as a correction, the store never having charged it. A store
// call out meanwhile that lists it finds it gone and gives its tokens
// back (handListedLocked).
func (q *waitQueue) handOne(c classify.Class, tokens bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.classes[c].q.head
	if w == nil {
		return
	}
	if tokens && w.cost > 0 {
		q.leases.corrections[c].Add(w.cost)
	}
	q.admitLocked(c, w)
}

// handCountedLocked gives class c's limit grants to its oldest waiters,
// for a call that did not list them: each costs one request, whoever it
// is. It returns how many it admitted.
func (q *waitQueue) handCountedLocked(c classify.Class, limit int64) (given int64) {
	for w := q.classes[c].q.head; w != nil && given < limit; {
		next := w.next
		q.admitLocked(c, w)
		given++
		w = next
	}
	return given
}

// admitLocked admits w, waiting in class c.
func (q *waitQueue) admitLocked(c classify.Class, w *waiter) {
	w.granted = true // before dequeue: fair queuing counts it served
	q.classes[c].dequeue(w)
	if w.gen != q.classes[c].shortfalls { // a store call since it joined left it waiting
		w.held, w.wait.HeldBy = true, heldBy(q.classes[c].blocked)
	}
	// Counted before the waiter can run: its Release must never find the
	// count without it (it went to -1 for a moment).
	q.leases.admit(c)
	close(w.done)
}
