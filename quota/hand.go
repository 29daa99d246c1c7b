package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// hand gives each class's grants to its waiters in the order the call
// listed them (oldest first), a capped caller's only as many as its cap
// was granted; grants nobody is left to take become credits when the call
// asked for spare ones (sent is when it was sent), and are released at
// once otherwise.
func (l *limiter) hand(req takeRequest, res takeResult, st *loopState, sent time.Time) {
	var excess PerClass
	l.mu.Lock()
	anyFull := l.settleCapsLocked(req, res, st)
	stale := st.gen != l.credits.gen // credits were dropped while the call was out
	if res.UpstreamHold > 0 {
		l.dropCreditsLocked(classify.Bulk) // the store holds bulk now; InFlight tells it on the next call
	}
	for c := range res.Granted {
		cq := &l.classes[c]
		limit := res.Granted[c]
		if stale {
			limit = min(limit, st.waiting[c]) // spare grants predate the drop: none to newcomers
		}
		// Past the grants, the walk goes on only to mark the waiters of a
		// full cap, as far as the call listed.
		var given int64
		seen := 0
		for w := cq.q.head; w != nil && (given < limit || (anyFull && seen < maxBatch)); seen++ {
			next := w.next
			if l.grantLocked(classify.Class(c), w, given < limit) {
				given++
			}
			w = next
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
			l.credits.grantLocked(classify.Class(c), excess[c], sent.Add(res.SecondLeft))
			excess[c] = 0
		}
	}
	l.mu.Unlock()
	if excess != (PerClass{}) {
		notify(l.freed) // the store counted them; the next call hands them back
	}
}

// grantLocked admits w if grant is set, unless its caller's cap was
// granted no more of class c in this call: then it stays, marked as held
// (and as waiting on its cap when the store found the cap full). It
// reports whether it admitted w.
func (l *limiter) grantLocked(c classify.Class, w *waiter, grant bool) bool {
	cq := &l.classes[c]
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
		w.capSlot = true
		cc.inFlight.Add(1)
	} else if !grant {
		return false
	}
	w.granted = true // before dequeueLocked: fair queuing counts it served
	l.dequeueLocked(c, w)
	w.held = w.held || w.gen != cq.shortfalls
	// Counted before the waiter can run: its Release must never find the
	// count without it (it went to -1 for a moment).
	l.inFlight[c].Add(1)
	close(w.done)
	return true
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
