package quota

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// pendingReport is what the upstream said since the replica's last store
// call, merged by store.UpstreamState's one rule. It is safe for concurrent use;
// the zero value holds nothing.
type pendingReport struct {
	mu  sync.Mutex
	u   store.UpstreamState
	has bool
}

// add merges an observation made at at (see store.UpstreamState.merge).
func (p *pendingReport) add(at time.Time, hold time.Duration, throttleUntil time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.u.Merge(at, hold, throttleUntil)
	p.has = true
}

// holds reports whether what is pending holds bulk at now: an
// observation below the reserve, or a 429's retry hint, that the store has
// not heard of yet.
func (p *pendingReport) holds(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.has && p.u.Holds(now)
}

// take returns what is pending as a report sent at now, and empties it;
// nil when nothing is.
func (p *pendingReport) take(now time.Time) *store.UpstreamReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.has {
		return nil
	}
	r := p.u.Report(now)
	p.u, p.has = store.UpstreamState{}, false
	return r
}

// restore puts back a report sent at sent that a failed call did not
// deliver, merged with what arrived meanwhile.
func (p *pendingReport) restore(r *store.UpstreamReport, sent time.Time) {
	if r == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.u.Apply(r, sent)
	p.has = true
}

// lastAnswer is the store's last word, read by metrics and /admin/state:
// the fleet's in flight, the upstream hold and the window's use. It is
// safe for concurrent use; the zero value has heard nothing.
type lastAnswer struct {
	// others are the other replicas' requests in flight (their credits
	// left out), as they last reported them.
	others       [classify.NumClasses]atomic.Int64
	upstreamHold atomic.Int64 // a time.Duration
	window       atomic.Pointer[store.WindowUse]
	// blockedSec is, by class, the window (Unix second) in which the store
	// last could not grant the class all it asked for; 0 when its last
	// answer granted it everything.
	blockedSec [classify.NumClasses]atomic.Int64
}

// blockedIn reports whether the store's last answer found class c blocked
// in window sec.
func (a *lastAnswer) blockedIn(c classify.Class, sec int64) bool {
	return a.blockedSec[c].Load() == sec
}

// set records res, the answer to req.
func (a *lastAnswer) set(req store.TakeRequest, res store.TakeResult) {
	a.upstreamHold.Store(int64(res.UpstreamHold))
	w := res.Window
	a.window.Store(&w)
	for c, b := range res.Blocker {
		sec := int64(0)
		if b != store.NotBlocked {
			sec = w.Sec
		}
		a.blockedSec[c].Store(sec)
	}
	for c := range res.FleetInFlight {
		mine := req.InFlight[c] + res.Granted[c]                    // this replica's slots after the call
		othersCredits := max(0, res.FleetCredits[c]-req.Credits[c]) // reservations, not requests
		a.others[c].Store(max(0, res.FleetInFlight[c]-mine-othersCredits))
	}
}
