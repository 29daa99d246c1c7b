package quota

import (
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// Caller caps: a caller with callers[].max_in_flight or
// callers[].requests_per_minute is bounded by them fleet-wide, inside its
// class's limits. Its waiters stand in the class's queue like anyone
// else's, and the same store call decides them: the store grants a capped
// caller's waiter only while its cap has room, and passes over it to the
// next waiter when it has none (grantInOrder), so a runaway caller waits
// behind its own cap while the rest of its class goes on. A capped
// caller's waiters have a queue bound of their own (the class's
// max_queue), apart from the class's.

// callerCap is one caller's configured cap; a zero field is no bound.
type callerCap struct {
	MaxInFlight       int64
	RequestsPerMinute int64
}

// capsOf are the callers' own caps, by name; uncapped callers have
// none.
func capsOf(callers []classify.Caller) map[string]callerCap {
	caps := map[string]callerCap{}
	for _, c := range callers {
		if c.MaxInFlight > 0 || c.RequestsPerMinute > 0 {
			caps[c.Name] = callerCap{MaxInFlight: c.MaxInFlight, RequestsPerMinute: c.RequestsPerMinute}
		}
	}
	return caps
}

// unbounded stands for a cap's missing bound: far beyond any account, and
// small enough that Allowance and Lua's doubles stay exact.
const unbounded = 1 << 40

// capBounds are a cap as a store enforces it: a missing bound is
// unbounded, and 0 admits nothing.
type capBounds struct {
	MaxInFlight       int64
	RequestsPerMinute int64
}

// bounds are the cap across the fleet (replicas 1), or one replica's part
// of it: divided by account.expected_replicas as Config.PerReplica
// divides the account.
func (cp callerCap) bounds(replicas int64) capBounds {
	replicas = max(1, replicas)
	b := capBounds{MaxInFlight: unbounded, RequestsPerMinute: unbounded}
	if cp.MaxInFlight > 0 {
		b.MaxInFlight = max(1, cp.MaxInFlight/replicas)
	}
	if cp.RequestsPerMinute > 0 {
		b.RequestsPerMinute = part(cp.RequestsPerMinute, 1/float64(replicas))
	}
	return b
}

// capCount is one capped caller on this replica: its cap, its waiters
// and its requests in flight. A cap lifted by a reload stays until the
// store has heard its last request end (prune).
type capCount struct {
	name string

	// Guarded by limiter.mu:
	cap          callerCap // zero once lifted
	fleet, local capBounds
	queued       [classify.NumClasses]int // its waiters in the class queues

	// inFlight counts its leases not yet released on this replica.
	inFlight atomic.Int64
	// fleetInFlight and sec are the store's last word: the fleet's count
	// under the cap, and the window second it was granted in.
	fleetInFlight, sec atomic.Int64

	// Owned by the admission loop (under limiter.mu while it builds a
	// call and hands out its grants):
	reported int64                      // the in-flight count the store last heard
	slot     int                        // position in this call's Caps plus one; 0 when not in it
	bounding bool                       // in this call, its waiters were listed under the cap (not lifted)
	listed   int                        // its waiters listed in this call
	grants   [classify.NumClasses]int64 // this call's grants not yet handed out
	full     bool                       // this call found the cap full
}

func (cc *capCount) lifted() bool { return cc.cap == (callerCap{}) }

// setCapsLocked applies the configured caps: a new cap starts at once, a
// changed one applies from the next store call, a lifted one lets its
// waiters go (they are granted as anyone's) and is pruned once the store
// has heard its last request end.
func (l *limiter) setCapsLocked(caps map[string]callerCap, replicas int64) {
	if l.caps == nil {
		l.caps = map[string]*capCount{}
	}
	for name, cc := range l.caps {
		if _, ok := caps[name]; !ok {
			cc.cap, cc.fleet, cc.local = callerCap{}, capBounds{}, capBounds{}
		}
	}
	for name, cp := range caps {
		cc := l.caps[name]
		if cc == nil {
			cc = &capCount{name: name}
			l.caps[name] = cc
		}
		cc.cap, cc.fleet, cc.local = cp, cp.bounds(1), cp.bounds(replicas)
	}
}

// capOfLocked is caller's cap, or nil when it has none.
func (l *limiter) capOfLocked(caller string) *capCount {
	if cc := l.caps[caller]; cc != nil && !cc.lifted() {
		return cc
	}
	return nil
}

// capListBound is the most waiters of one capped caller worth listing in
// a call: no more can be granted in one.
func capListBound(cp callerCap) int {
	n := int64(maxBatch)
	if cp.MaxInFlight > 0 {
		n = min(n, cp.MaxInFlight)
	}
	if cp.RequestsPerMinute > 0 {
		n = min(n, cp.RequestsPerMinute/60+1)
	}
	return int(n)
}

// capsForCallLocked lists the caps this call concerns — those with
// waiters, with requests in flight, or whose count the store has not yet
// heard fall to zero — sets their slots, and prunes lifted caps the
// store is done with.
func (l *limiter) capsForCallLocked(buf []*capCount) []*capCount {
	buf = buf[:0]
	for name, cc := range l.caps {
		cc.slot, cc.bounding, cc.listed, cc.grants, cc.full = 0, !cc.lifted(), 0, [classify.NumClasses]int64{}, false
		busy := cc.queued != [classify.NumClasses]int{} || cc.inFlight.Load() != 0 || cc.reported != 0
		if !busy {
			if cc.lifted() {
				delete(l.caps, name)
			}
			continue
		}
		buf = append(buf, cc)
		cc.slot = len(buf)
	}
	return buf
}

// poolCapTakes is what the store hears of caps.
func poolCapTakes(caps []*capCount, buf []poolCapTake) []poolCapTake {
	buf = buf[:0]
	for _, cc := range caps {
		ct := poolCapTake{Name: cc.name, InFlight: cc.inFlight.Load(), Cap: cc.fleet, Local: cc.local}
		if cc.lifted() {
			ct.Cap = capBounds{MaxInFlight: unbounded, RequestsPerMinute: unbounded}
			ct.Local = ct.Cap
		}
		buf = append(buf, ct)
	}
	return buf
}

// retryAfter estimates when a capped caller's request behind ahead others
// may go: by its rate when it has one, else a second.
func (cp callerCap) retryAfter(ahead int) time.Duration {
	if cp.RequestsPerMinute <= 0 {
		return time.Second
	}
	return retryAfterAt(perSecond(cp.RequestsPerMinute), ahead)
}

// CapState is one capped caller's numbers, for metrics and /admin/state.
type CapState struct {
	MaxInFlight       int64 `json:"max_in_flight,omitempty"`
	RequestsPerMinute int64 `json:"requests_per_minute,omitempty"`
	// Queued is how many of its requests wait on this replica.
	Queued int `json:"queued"`
	// InFlight is this replica's count under the cap; FleetInFlight the
	// store's last word on the fleet's.
	InFlight      int64 `json:"in_flight"`
	FleetInFlight int64 `json:"fleet_in_flight"`
}

// capState returns the capped callers' numbers, by caller name.
func (l *limiter) capState() map[string]CapState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]CapState{}
	for name, cc := range l.caps {
		if cc.lifted() {
			continue
		}
		out[name] = CapState{MaxInFlight: cc.cap.MaxInFlight, RequestsPerMinute: cc.cap.RequestsPerMinute,
			Queued: cc.queued[classify.Interactive] + cc.queued[classify.Bulk], InFlight: cc.inFlight.Load(),
			FleetInFlight: cc.fleetInFlight.Load()}
	}
	return out
}
