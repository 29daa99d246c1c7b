package quota

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// callerCap bounds one caller fleet-wide, inside its class's limits
// (callers[].max_in_flight and callers[].requests_per_minute). A zero
// field is no bound.
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

// config is the admission configuration of the cap's own limiter: one
// account of the cap's size, both classes may take all of it, the classes'
// max_wait and max_queue as base has them.
func (cp callerCap) config(base Config) Config {
	bound := func(v int64) int64 {
		if v <= 0 {
			return unbounded
		}
		return v
	}
	cfg := base
	cfg.Account = AccountConfig{RequestsPerMinute: bound(cp.RequestsPerMinute), MaxInFlight: bound(cp.MaxInFlight),
		ExpectedReplicas: base.Account.ExpectedReplicas}
	cfg.Classes.Interactive.Share, cfg.Classes.Interactive.Reserve = 1, 0
	cfg.Classes.Bulk.Share, cfg.Classes.Bulk.Borrow = 1, false
	return cfg
}

// callerCaps admits requests through their caller's cap, then through the class
// limiter. A capped caller waits on a limiter of its own (in Redis, keys
// of its own), so its waiters never stand in the class's FIFO ahead of
// other callers: a runaway batch caller queues behind its own cap while
// the rest of its class goes on. The whole wait stays within the class's
// max_wait. Callers without a cap go straight to the class limiter, with
// no extra store call. Safe for concurrent use.
type callerCaps struct {
	class   *limiter
	backend *backend
	log     *slog.Logger

	// gates are the capped callers' limiters, by caller name; replaced
	// whole by Reconfigure.
	gates atomic.Pointer[map[string]capGate]

	mu sync.Mutex // guards what follows
	// all holds the cap limiters, by caller. A caller whose cap is lifted
	// keeps its limiter, unbounded, so the requests it holds release
	// normally; the first reload after that at which it holds nothing
	// drops it (see prune), so the map does not only grow.
	all     map[string]*capLimiter
	ctx     context.Context // set by Run
	stopped bool
	wg      sync.WaitGroup
}

// capLimiter is one caller's cap limiter and how to stop it.
type capLimiter struct {
	lim *limiter
	// stop ends its Run (nil before callerCaps.Run starts it).
	stop context.CancelFunc
	// lifted says a reload lifted the cap: the gates no longer lead to it.
	lifted bool
}

// capGate is one capped caller's limiter and configured cap.
type capGate struct {
	lim *limiter
	cap callerCap
}

// newCallerCaps returns the caps of cfg's callers in front of class, with stores
// from backend.
func newCallerCaps(class *limiter, backend *backend, cfg Config, caps map[string]callerCap, log *slog.Logger) *callerCaps {
	c := &callerCaps{class: class, backend: backend, log: log, all: map[string]*capLimiter{}}
	c.Reconfigure(cfg, caps)
	return c
}

// Admit admits a request of caller and class: first under the caller's
// cap, if it has one, then under the class, both within the class's
// max_wait. The Lease releases both. A refusal by the cap is a
// *RefusedError whose Caller is set.
func (c *callerCaps) Admit(ctx context.Context, caller string, class classify.Class, tokens int64) (*Lease, error) {
	gate, ok := (*c.gates.Load())[caller]
	if !ok {
		return c.class.Admit(ctx, class, tokens)
	}
	deadline := time.Now().Add(c.class.maxWait(class))
	capLease, err := gate.lim.Admit(ctx, class, 0)
	if err != nil {
		if refused, ok := errors.AsType[*RefusedError](err); ok {
			refused.Caller = caller
		}
		return nil, err
	}
	lease, err := c.class.admitBy(ctx, class, tokens, deadline)
	if err != nil {
		capLease.Release()
		return nil, err
	}
	lease.cap = capLease
	return lease, nil
}

// Reconfigure applies new caps and classes: a new cap starts at once, a
// changed one applies from its store's next call, a lifted one lets its
// waiters go. Requests in flight keep their slots.
func (c *callerCaps) Reconfigure(cfg Config, caps map[string]callerCap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := make(map[string]capGate, len(caps))
	for name, cp := range caps {
		if cp == (callerCap{}) {
			continue
		}
		gcfg := cp.config(cfg)
		cl := c.all[name]
		if cl == nil {
			g := newLimiter(gcfg, gcfg.Enforced(), c.backend.capStore(name), c.backend.Heartbeat,
				c.log.With(slog.String("cap", name)))
			g.quiet = true
			cl = &capLimiter{lim: g}
			c.all[name] = cl
			c.start(cl)
		} else {
			cl.lim.Reconfigure(gcfg, gcfg.Enforced())
		}
		cl.lifted = false
		now[name] = capGate{lim: cl.lim, cap: cp}
	}
	c.gates.Store(&now)
	for name, cl := range c.all {
		if _, ok := now[name]; !ok {
			c.prune(name, cl, cfg)
		}
	}
}

// prune handles a cap no longer configured: the reload that lifts it
// makes it unbounded, so its waiters go and its requests release
// normally; a later reload finds it holding nothing and drops it, its
// goroutine and its store's probe. (A request that read the gates before
// the lifting reload may still reach it until then.) Guarded by mu.
func (c *callerCaps) prune(name string, cl *capLimiter, cfg Config) {
	if !cl.lifted {
		cl.lifted = true
		gcfg := callerCap{}.config(cfg)
		cl.lim.Reconfigure(gcfg, gcfg.Enforced())
		return
	}
	if cl.lim.occupied() != (PerClass{}) || cl.lim.Queued(classify.Interactive)+cl.lim.Queued(classify.Bulk) > 0 {
		return
	}
	if cl.stop != nil {
		cl.stop()
	}
	delete(c.all, name)
	c.backend.releaseCapStore(name)
}

// start runs cl's limiter if Run has started; guarded by mu.
func (c *callerCaps) start(cl *capLimiter) {
	if c.ctx != nil && !c.stopped {
		ctx, cancel := context.WithCancel(c.ctx)
		cl.stop = cancel
		c.wg.Go(func() { _ = cl.lim.Run(ctx) })
	}
}

// Run serves every cap until ctx ends, like limiter.Run. Call it once.
func (c *callerCaps) Run(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	for _, cl := range c.all {
		c.start(cl)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// CapState is one capped caller's numbers, for metrics and /admin/state.
type CapState struct {
	MaxInFlight       int64 `json:"max_in_flight,omitempty"`
	RequestsPerMinute int64 `json:"requests_per_minute,omitempty"`
	// Queued is how many of its requests wait on this replica for the cap.
	Queued int `json:"queued"`
	// InFlight is this replica's count under the cap; FleetInFlight the
	// store's last word on the fleet's.
	InFlight      int64 `json:"in_flight"`
	FleetInFlight int64 `json:"fleet_in_flight"`
}

// State returns the capped callers' numbers, by caller name.
func (c *callerCaps) State() map[string]CapState {
	gates := maps.Clone(*c.gates.Load())
	out := make(map[string]CapState, len(gates))
	for name, g := range gates {
		st := CapState{MaxInFlight: g.cap.MaxInFlight, RequestsPerMinute: g.cap.RequestsPerMinute}
		for _, cl := range classify.Classes {
			st.Queued += g.lim.Queued(cl)
			st.InFlight += g.lim.InFlight(cl)
			st.FleetInFlight += g.lim.FleetInFlight(cl)
		}
		out[name] = st
	}
	return out
}
