package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// hand gives each class's grants to its waiters: in a call that listed
// them (tokens enforced, or capped callers waiting), to the waiters the
// list named, as the store decided for them (handListedLocked); else,
// where any waiter costs what another does (one request), to the oldest
// (handCountedLocked). Grants nobody is left to take become credits when
// the call asked for spare ones (sent is when it was sent), and are
// released at once otherwise.
func (l *limiter) hand(req takeRequest, res takeResult, st *loopState, sent time.Time) {
	var excess PerClass
	l.mu.Lock()
	anyFull := l.settleCapsLocked(req, res, st)
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
			given = l.handListedLocked(cls, req.Waiters[c], st.listed[c], res.Granted[c], !stale && req.Limits.AccountTPM <= 0)
			clear(st.listed[c]) // keep no waiter alive past the call
		} else {
			limit := res.Granted[c]
			if stale {
				limit = min(limit, st.waiting[c]) // spare grants predate the drop: none to newcomers
			}
			given = l.handCountedLocked(cls, limit)
		}
		if anyFull {
			l.markCapWaitsLocked(cls)
		}
		// A class is short when it had no room; a waiter left for its
		// own cap does not make it so (it is held all the same).
		short := res.Granted[c] < req.Want[c] && res.Blocker[c] != blockedByCap
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
// listed — ws as sent, who the waiters it named, position for position,
// nil for a spare — as the store granted them (grantInOrder): in the
// list's order, passing over the waiters of a cap whose grants are
// spent. So each grant goes to the waiter it was charged for, never to
// one that joined the queue ahead of it while the call was out (a
// 100,000-token newcomer once took a 500-token waiter's grant). A listed
// waiter that has left since (cancelled, timed out) is admitted nothing:
// the tokens charged for it are given back, and its grant, like a
// spare's, is excess. With toNewcomers, spare grants go to uncapped
// waiters that joined during the call. It returns how many it admitted.
func (l *limiter) handListedLocked(c classify.Class, ws []queued, who []*waiter, n int64, toNewcomers bool) (given int64) {
	var granted, spares int64
	for i, q := range ws {
		if granted == n {
			break
		}
		w := who[i]
		if w != nil && q.Cap > 0 {
			if w.cap.grants[c] == 0 { // passed over: its cap was full
				if w.queued {
					w.held, w.capWait = true, w.cap.full
				}
				continue
			}
			w.cap.grants[c]--
		}
		granted++
		switch {
		case w == nil:
			spares++
		case !w.queued: // it left while the call was out
			if w.cost > 0 {
				l.corrections[c].Add(-w.cost)
				l.tokensFreed.Store(true)
			}
		default:
			l.admitLocked(c, w, q.Cap > 0)
			given++
		}
	}
	if toNewcomers {
		for w := l.classes[c].q.head; w != nil && spares > 0; {
			next := w.next
			if cc := w.cap; cc == nil || (cc.slot != 0 && !cc.bounding) { // uncapped in this call
				l.admitLocked(c, w, false)
				given++
				spares--
			}
			w = next
		}
	}
	return given
}

// handCountedLocked gives class c's limit grants to its oldest waiters,
// for a call that did not list them: each costs one request, whoever it
// is. A capped caller's waiter takes one only as its cap was granted
// (grantLocked). It returns how many it admitted.
func (l *limiter) handCountedLocked(c classify.Class, limit int64) (given int64) {
	for w := l.classes[c].q.head; w != nil && given < limit; {
		next := w.next
		if l.grantLocked(c, w, true) {
			given++
		}
		w = next
	}
	return given
}

// markCapWaitsLocked marks class c's waiters that a full cap left
// waiting (as far as a call lists, maxBatch): they are held, on their
// caps.
func (l *limiter) markCapWaitsLocked(c classify.Class) {
	seen := 0
	for w := l.classes[c].q.head; w != nil && seen < maxBatch; seen++ {
		next := w.next
		l.grantLocked(c, w, false)
		w = next
	}
}

// grantLocked admits w if grant is set, unless its caller's cap was
// granted no more of class c in this call: then it stays, marked as held
// (and as waiting on its cap when the store found the cap full). It
// reports whether it admitted w.
func (l *limiter) grantLocked(c classify.Class, w *waiter, grant bool) bool {
	capSlot := false
	if cc := w.cap; cc != nil && (cc.slot == 0 || cc.bounding) {
		if cc.grants[c] == 0 {
			w.held = true // not granted by this call: it waits
			w.capWait = cc.full
			return false
		}
		if !grant {
			return false
		}
		cc.grants[c]--
		capSlot = true
	} else if !grant {
		return false
	}
	l.admitLocked(c, w, capSlot)
	return true
}

// admitLocked admits w, waiting in class c; capSlot says its grant took
// a slot under its caller's cap.
func (l *limiter) admitLocked(c classify.Class, w *waiter, capSlot bool) {
	if capSlot {
		w.capSlot = true
		w.cap.inFlight.Add(1)
	}
	w.granted = true // before dequeueLocked: fair queuing counts it served
	l.dequeueLocked(c, w)
	w.held = w.held || w.gen != l.classes[c].shortfalls
	// Counted before the waiter can run: its Release must never find the
	// count without it (it went to -1 for a moment).
	l.inFlight[c].Add(1)
	close(w.done)
}

// settleCapsLocked records the store's answer for the call's caps: what
// it heard, the fleet's counts, and the grants to hand out. It reports
// whether any cap was full.
func (l *limiter) settleCapsLocked(req takeRequest, res takeResult, st *loopState) (anyFull bool) {
	for k, cc := range st.caps {
		if k >= len(res.Caps) {
			break
		}
		r := res.Caps[k]
		cc.grants, cc.full = r.Granted, r.Full
		anyFull = anyFull || r.Full
		cc.reported = req.Caps[k].InFlight + r.Granted[classify.Interactive] + r.Granted[classify.Bulk]
		cc.fleetInFlight.Store(r.FleetInFlight)
		if r.Granted != (PerClass{}) {
			cc.sec.Store(res.Window.Sec)
		}
		if cc.lifted() && cc.reported == 0 && cc.inFlight.Load() == 0 && cc.queued == [classify.NumClasses]int{} {
			delete(l.caps, cc.name) // the store has heard its last request end
		}
	}
	return anyFull
}
