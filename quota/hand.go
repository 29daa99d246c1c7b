package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// hand gives each class's grants to its waiters: in a call that listed
// them (tokens enforced), to the waiters the list named
// (handListedLocked); else, where any waiter costs what another does (one
// request), to the oldest (handCountedLocked). Grants nobody is left to
// take become credits when the call asked for spare ones (sent is when it
// was sent), and are released at once otherwise.
func (l *limiter) hand(req takeRequest, res takeResult, st *loopState, sent time.Time) {
	var excess PerClass
	l.mu.Lock()
	stale := st.gen != l.credits.gen // credits were dropped while the call was out
	if res.UpstreamHold > 0 {
		l.dropCreditsLocked(classify.Bulk) // the store holds bulk now; InFlight tells it on the next call
	}
	for c := range res.Granted {
		cls, cq := classify.Class(c), &l.classes[c]
		var given int64
		if req.Waiters[c] != nil {
			// Spare grants predate a drop of the credits (stale), and with
			// tokens enforced were charged nothing: then none to newcomers.
			given = l.handListedLocked(cls, st.listed[c], res.Granted[c], !stale && req.Limits.AccountTPM <= 0)
			clear(st.listed[c]) // keep no waiter alive past the call
		} else {
			limit := res.Granted[c]
			if stale {
				limit = min(limit, st.waiting[c]) // spare grants predate the drop: none to newcomers
			}
			given = l.handCountedLocked(cls, limit)
		}
		short := res.Granted[c] < req.Want[c]
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
			l.credits.grantLocked(cls, excess[c], sent.Add(res.SecondLeft))
			excess[c] = 0
		}
	}
	l.mu.Unlock()
	if excess != (PerClass{}) {
		notify(l.freed) // the store counted them; the next call hands them back
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
func (l *limiter) handListedLocked(c classify.Class, who []*waiter, n int64, toNewcomers bool) (given int64) {
	var spares int64
	for _, w := range who[:min(int64(len(who)), n)] {
		switch {
		case w == nil:
			spares++
		case !w.queued: // it left while the call was out
			if w.cost > 0 {
				l.corrections[c].Add(-w.cost)
				l.tokensFreed.Store(true)
			}
		default:
			l.admitLocked(c, w)
			given++
		}
	}
	if toNewcomers {
		given += l.handCountedLocked(c, spares)
	}
	return given
}

// handCountedLocked gives class c's limit grants to its oldest waiters,
// for a call that did not list them: each costs one request, whoever it
// is. It returns how many it admitted.
func (l *limiter) handCountedLocked(c classify.Class, limit int64) (given int64) {
	for w := l.classes[c].q.head; w != nil && given < limit; {
		next := w.next
		l.admitLocked(c, w)
		given++
		w = next
	}
	return given
}

// admitLocked admits w, waiting in class c.
func (l *limiter) admitLocked(c classify.Class, w *waiter) {
	w.granted = true // before dequeueLocked: fair queuing counts it served
	l.dequeueLocked(c, w)
	w.held = w.held || w.gen != l.classes[c].shortfalls
	// Counted before the waiter can run: its Release must never find the
	// count without it (it went to -1 for a moment).
	l.inFlight[c].Add(1)
	close(w.done)
}
