package store

import (
	"context"
	"log/slog"
	"time"
)

var _ Store = (*Failover)(nil)

// Failover puts a shared store (Redis) first and decides what happens
// when it fails, by store.on_error. Its breaker stops calls to the shared
// store after one fails and brings it back as soon as it answers.
type Failover struct {
	primary Store
	local   Store // per-replica limits, for OnErrorLocal
	policy  OnError
	breaker *breaker

	// observe, when set before the first Take, sees every call to the
	// shared store (metrics): its duration and error. Calls answered by
	// the fallback are not calls to it.
	Observe func(time.Duration, error)
}

// NewFailover returns a store that uses primary while it answers and
// otherwise follows policy; local enforces per-replica limits for
// OnErrorLocal. probe (e.g. a PING) is tried every probeEvery while
// degraded; the first success ends the degradation. Close stops the probe.
func NewFailover(primary, local Store, policy OnError, probe func(context.Context) error, probeEvery time.Duration, log *slog.Logger) *Failover {
	return &Failover{primary: primary, local: local, policy: policy, breaker: newBreaker(probe, probeEvery, policy, log)}
}

// Policy returns the store.on_error policy s follows.
func (s *Failover) Policy() OnError { return s.policy }

// Degraded reports whether the shared store is being bypassed.
func (s *Failover) Degraded() bool { return s.breaker.Degraded() }

// Failures counts failed calls to the shared store (probes included).
func (s *Failover) Failures() int64 { return s.breaker.Failures() }

// OnRecovered has f called as each outage ends (go-redis's own messages
// flush their count then: RedisLog). Call it before the first Take.
func (s *Failover) OnRecovered(f func()) { s.breaker.recovered = f }

// Close stops the breaker's probe.
func (s *Failover) Close() { s.breaker.Close() }

// Take implements Store.
func (s *Failover) Take(ctx context.Context, req TakeRequest) (TakeResult, error) {
	var res TakeResult
	if done, err := s.Call(ctx, func(ctx context.Context) (err error) {
		res, err = s.primary.Take(ctx, req)
		return err
	}); done {
		return res, err
	}
	switch s.policy {
	case OnErrorOpen:
		return grantEverything(req), nil
	case OnErrorClosed:
		return TakeResult{}, ErrStoreUnavailable
	default:
		req.Limits = req.LocalLimits
		return s.local.Take(ctx, req)
	}
}

// Call calls call on the shared store unless the breaker is
// open, and reports whether its answer stands: it succeeded, or ctx ended
// (the caller left: not the store's doing). Otherwise store.on_error
// decides, and a failure opens the breaker.
func (s *Failover) Call(ctx context.Context, call func(context.Context) error) (done bool, err error) {
	if s.breaker.Degraded() {
		return false, nil
	}
	start := time.Now()
	err = call(ctx)
	if ctx.Err() != nil {
		return true, err
	}
	if s.Observe != nil {
		s.Observe(time.Since(start), err)
	}
	if err == nil {
		s.breaker.succeeded()
		return true, nil
	}
	s.breaker.failed(ctx, err)
	return false, nil
}

// grantEverything answers req as store.on_error "open" does: every
// waiter goes.
func grantEverything(req TakeRequest) TakeResult {
	return TakeResult{Granted: req.Want, FleetInFlight: addPerClass(req.InFlight, req.Want)}
}

func addPerClass(a, b PerClass) PerClass {
	for c := range a {
		a[c] += b[c]
	}
	return a
}
