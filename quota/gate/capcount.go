package gate

import (
	"context"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
)

// CapCounter counts capped callers' requests where replicas share them:
// each caller's current one-second window and its requests in flight.
// The in-process counter serves one replica; the Redis one (capredis.go)
// a fleet. Safe for concurrent use.
type CapCounter interface {
	// take records that this replica holds t.InFlight of t.Name's
	// requests (absolute), then grants up to t.Want more as t.Cap allows
	// and counts them, in the window and in flight.
	take(ctx context.Context, t capTake) (capAnswer, error)
}

// capTake asks a CapCounter for one caller's slots.
type capTake struct {
	Name string
	// Want is how many of its requests wait on this replica.
	Want int64
	// InFlight is how many of its requests this replica holds now
	// (absolute), not counting what this call grants.
	InFlight int64
	// Cap is what the counter enforces across the fleet; Local the
	// per-replica fallback (store.on_error local). A bound of unbounded
	// is none.
	Cap, Local capBounds
}

// capAnswer is a CapCounter's answer.
type capAnswer struct {
	// Granted is how many of Want may go, 0..Want.
	Granted int64
	// FleetInFlight is the caller's count in flight across the fleet
	// after the call (for one replica, its own).
	FleetInFlight int64
	// Sec is the window second the call was decided in, by the counter's
	// clock.
	Sec int64
	// RetryAfter is when asking again can succeed when fewer than Want
	// were granted: the next second for the window, the counter's poll
	// interval for the in-flight bound (0: a release here is the signal).
	RetryAfter time.Duration
}

// capRoom is the room a caller capped at b has with used requests in
// the window of second sec and fleet in flight, and the grant of want
// in it. The Redis counter's cap.lua is the same rule.
func capRoom(b capBounds, sec, used, fleet, want int64) (granted int64, windowFull bool) {
	wroom := store.Allowance(sec, b.RequestsPerMinute) - used
	granted = max(0, min(want, wroom, b.MaxInFlight-fleet))
	return granted, granted < want && wroom <= granted
}

var _ CapCounter = (*MemoryCapCounter)(nil)

// MemoryCapCounter is the in-process CapCounter: one replica's counts,
// lost with it. Its zero value is not usable; call NewMemoryCapCounter.
type MemoryCapCounter struct {
	now func() time.Time

	mu   sync.Mutex
	used map[string]capWindow
}

// capWindow is what one caller used of second sec.
type capWindow struct{ sec, n int64 }

// NewMemoryCapCounter returns an in-process counter reading the time from
// now (time.Now when nil).
func NewMemoryCapCounter(now func() time.Time) *MemoryCapCounter {
	if now == nil {
		now = time.Now
	}
	return &MemoryCapCounter{now: now, used: map[string]capWindow{}}
}

// take implements CapCounter.
func (m *MemoryCapCounter) take(_ context.Context, t capTake) (capAnswer, error) {
	now := m.now()
	sec := now.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.used[t.Name]
	if w.sec != sec {
		w = capWindow{sec: sec}
	}
	granted, windowFull := capRoom(t.Cap, sec, w.n, t.InFlight, t.Want)
	w.n += granted
	if w.n == 0 {
		delete(m.used, t.Name)
	} else {
		m.used[t.Name] = w
	}
	ans := capAnswer{Granted: granted, FleetInFlight: t.InFlight + granted, Sec: sec}
	if windowFull {
		ans.RetryAfter = store.UntilNextSecond(now)
	}
	return ans, nil
}
