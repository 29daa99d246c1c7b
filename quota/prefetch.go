package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Prefetch: with a shared store every admission would otherwise wait for a
// Redis round trip, and a replica seeing requests one at a time would make
// one call per request. While a class is far from every limit, the loop
// asks the store for a few grants more than it has waiters — credits — and
// Admit hands them out at once, without waking the loop. Credits are real
// grants: the store charged them to the current second's window and counts
// them in flight (InFlight includes them), so no limit is ever exceeded; an
// unused credit only wastes its share of a window that was at most half
// used. They expire with the store's second (a credit of second S is never
// spent in S+1), are dropped when the upstream holds bulk or the limits
// change, and are not taken at all near a limit, while tokens are enforced
// (a credit's cost is unknown), or while anyone waits (a newcomer never
// passes a waiter) but a capped caller held by its own cap.

const (
	// maxSpare bounds the credits asked for per class and call.
	maxSpare = 64
	// spareHorizon is how much of the recent arrival rate the credits
	// cover: enough that refills, asked when three quarters are spent,
	// rarely leave a request waiting on a round trip.
	spareHorizon = 50 * time.Millisecond
	// rateWindow is how often the loop updates its arrival rate estimate.
	rateWindow = 100 * time.Millisecond
)

// prefetchState is the loop's bookkeeping; owned by the Run goroutine.
type prefetchState struct {
	spare     [classify.NumClasses]int64 // credits to hold, 0: none
	rate      [classify.NumClasses]float64
	lastCount [classify.NumClasses]int64
	lastAt    time.Time
	// seen is the admissions counter at the last call: credits are asked
	// for only while requests keep coming, so an idle replica holds none.
	seen [classify.NumClasses]int64
}

// updateRate refreshes the arrival rate estimate from the admissions
// counter, at most every rateWindow.
func (p *prefetchState) updateRate(now time.Time, admitted *[classify.NumClasses]int64) {
	if p.lastAt.IsZero() {
		p.lastAt, p.lastCount = now, *admitted
		return
	}
	elapsed := now.Sub(p.lastAt)
	if elapsed < rateWindow {
		return
	}
	for c := range p.rate {
		fresh := float64(admitted[c]-p.lastCount[c]) / elapsed.Seconds()
		p.rate[c] = (p.rate[c] + fresh) / 2
	}
	p.lastAt, p.lastCount = now, *admitted
}

// plan sets how many credits to hold per class after a store answer: the
// rate over spareHorizon, at most maxSpare and a quarter of the room left,
// and none unless the class is far from every limit (less than half of
// the window and of the in-flight bound used, for the class and the
// account), was granted all it asked, and (bulk) is not held upstream.
func (lp *admissionLoop) plan(p *prefetchState, res store.TakeResult, lim store.Limits) {
	const I, B = classify.Interactive, classify.Bulk
	p.spare = [classify.NumClasses]int64{}
	defer func() { lp.queue.setRefill(p.spare) }() // whatever it decides
	if !lp.prefetch || lim.AccountTPM > 0 {
		return
	}
	sec, use, fleet := res.Window.Sec, res.Window.Requests, res.FleetInFlight
	account := store.Allowance(sec, lim.AccountRPM)
	usedAll, fleetAll := use[I]+use[B], fleet[I]+fleet[B]
	room := min(account-usedAll, lim.InFlight-fleetAll)
	if 2*usedAll >= account || 2*fleetAll >= lim.InFlight {
		return
	}
	for c := range p.spare {
		if res.Blocker[c] != store.NotBlocked {
			continue
		}
		if c == int(B) {
			if res.UpstreamHold > 0 {
				continue
			}
			window, inFlight := store.Allowance(sec, lim.BulkRPM), lim.BulkInFlight
			if lim.Borrow {
				window = max(window, account-store.Allowance(sec, lim.ReserveRPM))
				inFlight = max(inFlight, lim.InFlight-lim.ReserveInFlight)
			}
			if 2*use[B] >= window || 2*fleet[B] >= inFlight {
				continue
			}
			room = min(room, window-use[B], inFlight-fleet[B])
		}
		if n := int64(p.rate[c] * spareHorizon.Seconds()); n >= 2 {
			p.spare[c] = min(n, maxSpare, room/4)
		}
	}
}
