package gate

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Caller caps: a caller with callers[].max_in_flight or
// callers[].requests_per_minute is bounded by them fleet-wide, inside its
// class's limits, by one gate in front of every pool (CapGate): its
// request takes a slot under its cap before it waits for its pool, and
// the pools know nothing of caps.

// Cap is one caller's configured cap; a zero field is no bound.
type Cap struct {
	MaxInFlight       int64
	RequestsPerMinute int64
}

// CapsOf are the callers' own caps, by name; uncapped callers have
// none.
func CapsOf(callers []classify.Caller) map[string]Cap {
	caps := map[string]Cap{}
	for _, c := range callers {
		if c.MaxInFlight > 0 || c.RequestsPerMinute > 0 {
			caps[c.Name] = Cap{MaxInFlight: c.MaxInFlight, RequestsPerMinute: c.RequestsPerMinute}
		}
	}
	return caps
}

// unbounded stands for a cap's missing bound: far beyond any account, and
// small enough that Allowance and Lua's doubles stay exact.
const unbounded = 1 << 40

// capBounds are a cap as a CapCounter enforces it: a missing bound is
// unbounded, and 0 admits nothing.
type capBounds struct {
	MaxInFlight       int64
	RequestsPerMinute int64
}

// bounds are the cap across the fleet (replicas 1), or one replica's part
// of it: divided by account.expected_replicas as quota.Config.PerReplica
// divides the account.
func (cp Cap) bounds(replicas int64) capBounds {
	replicas = max(1, replicas)
	b := capBounds{MaxInFlight: unbounded, RequestsPerMinute: unbounded}
	if cp.MaxInFlight > 0 {
		b.MaxInFlight = max(1, cp.MaxInFlight/replicas)
	}
	if cp.RequestsPerMinute > 0 {
		b.RequestsPerMinute = adaptive.Part(cp.RequestsPerMinute, 1/float64(replicas))
	}
	return b
}

// capListBound is the most waiters of one capped caller worth asking
// for in a call: no more can be granted in one.
func capListBound(cp Cap) int {
	n := int64(store.MaxBatch)
	if cp.MaxInFlight > 0 {
		n = min(n, cp.MaxInFlight)
	}
	if cp.RequestsPerMinute > 0 {
		n = min(n, cp.RequestsPerMinute/60+1)
	}
	return int(n)
}

// retryAfter estimates when a capped caller's request behind ahead others
// may go: by its rate when it has one, else a second.
func (cp Cap) retryAfter(ahead int) time.Duration {
	if cp.RequestsPerMinute <= 0 {
		return time.Second
	}
	return store.RetryAfterAt(store.PerSecond(cp.RequestsPerMinute), ahead)
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
