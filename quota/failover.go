package quota

import (
	"context"
	"log/slog"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// OnError is a store.on_error policy: what admission does while the
// shared store (Redis) fails.
type OnError string

// The store.on_error policies.
const (
	// OnErrorLocal falls back to per-replica limits (fleet ÷ expected_replicas).
	OnErrorLocal OnError = "local"
	// OnErrorOpen admits without limits.
	OnErrorOpen OnError = "open"
	// OnErrorClosed refuses with ErrStoreUnavailable (a 503).
	OnErrorClosed OnError = "closed"
)

// onErrorPolicies are the store.on_error values.
var onErrorPolicies = []OnError{OnErrorLocal, OnErrorOpen, OnErrorClosed}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another policy is refused at load, by key.
func (p *OnError) UnmarshalText(b []byte) error {
	return configcheck.SetOneOf(p, b, onErrorPolicies...)
}

var _ store = (*failoverStore)(nil)

// failoverStore puts a shared store (Redis) first and decides what happens
// when it fails, by store.on_error. Its breaker stops calls to the shared
// store after one fails and brings it back as soon as it answers.
type failoverStore struct {
	primary store
	local   store // per-replica limits, for OnErrorLocal
	policy  OnError
	breaker *breaker

	// observe, when set before the first Take, sees every call to the
	// shared store (metrics): its duration and error. Calls answered by
	// the fallback are not calls to it.
	observe func(time.Duration, error)
}

// newFailoverStore returns a store that uses primary while it answers and
// otherwise follows policy; local enforces per-replica limits for
// OnErrorLocal. probe (e.g. a PING) is tried every probeEvery while
// degraded; the first success ends the degradation. Close stops the probe.
func newFailoverStore(primary, local store, policy OnError, probe func(context.Context) error, probeEvery time.Duration, log *slog.Logger) *failoverStore {
	return &failoverStore{primary: primary, local: local, policy: policy, breaker: newBreaker(probe, probeEvery, policy, log)}
}

// Degraded reports whether the shared store is being bypassed.
func (s *failoverStore) Degraded() bool { return s.breaker.Degraded() }

// Failures counts failed calls to the shared store (probes included).
func (s *failoverStore) Failures() int64 { return s.breaker.Failures() }

// Close stops the breaker's probe.
func (s *failoverStore) Close() { s.breaker.Close() }

// Take implements Store.
func (s *failoverStore) Take(ctx context.Context, req takeRequest) (takeResult, error) {
	var res takeResult
	if done, err := s.callPrimary(ctx, func(ctx context.Context) (err error) {
		res, err = s.primary.Take(ctx, req)
		return err
	}); done {
		return res, err
	}
	switch s.policy {
	case OnErrorOpen:
		return grantEverything(req), nil
	case OnErrorClosed:
		return takeResult{}, ErrStoreUnavailable
	default:
		req.Limits = req.LocalLimits
		return s.local.Take(ctx, req)
	}
}

// callPrimary calls call on the shared store unless the breaker is
// open, and reports whether its answer stands: it succeeded, or ctx ended
// (the caller left: not the store's doing). Otherwise store.on_error
// decides, and a failure opens the breaker.
func (s *failoverStore) callPrimary(ctx context.Context, call func(context.Context) error) (done bool, err error) {
	if s.breaker.Degraded() {
		return false, nil
	}
	start := time.Now()
	err = call(ctx)
	if ctx.Err() != nil {
		return true, err
	}
	if s.observe != nil {
		s.observe(time.Since(start), err)
	}
	if err == nil {
		s.breaker.succeeded()
		return true, nil
	}
	s.breaker.failed(ctx, err)
	return false, nil
}

var _ capCounter = failoverCapCounter{}

// failoverCapCounter is the callers' caps behind the same breaker and
// store.on_error policy as the pools: while Redis fails, caps are
// counted per replica (local), not at all (open), or refuse (closed).
type failoverCapCounter struct {
	primary, local capCounter
	f              *failoverStore
}

// take implements capCounter.
func (c failoverCapCounter) take(ctx context.Context, t capTake) (capAnswer, error) {
	var ans capAnswer
	if done, err := c.f.callPrimary(ctx, func(ctx context.Context) (err error) {
		ans, err = c.primary.take(ctx, t)
		return err
	}); done {
		return ans, err
	}
	switch c.f.policy {
	case OnErrorOpen:
		return capAnswer{Granted: t.Want, FleetInFlight: t.InFlight + t.Want}, nil
	case OnErrorClosed:
		return capAnswer{}, ErrStoreUnavailable
	default:
		t.Cap = t.Local
		return c.local.take(ctx, t)
	}
}

// grantEverything answers req as store.on_error "open" does: every
// waiter goes.
func grantEverything(req takeRequest) takeResult {
	return takeResult{Granted: req.Want, FleetInFlight: addPerClass(req.InFlight, req.Want)}
}

func addPerClass(a, b PerClass) PerClass {
	for c := range a {
		a[c] += b[c]
	}
	return a
}
