package quota

import (
	"context"
	"log/slog"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Admitter is quota's entry point: it admits each request against the
// account — its class's share of the one-second windows and the
// in-flight bound, and its caller's cap if the caller has one, decided
// together —
// over the store the configuration names (in process, or Redis for a
// fleet). It is safe for concurrent use. Admit may be called before Run
// starts; waiters are served once it does.
type Admitter struct {
	backend *backend
	// pools are the pools' limiters, by pool name (pool.go); fixed at New.
	pools map[string]*limiter
	// limiter is the account's pool, which metrics and State show.
	limiter *limiter
}

// Deps are what an Admitter is built from besides its Config.
type Deps struct {
	// Callers are the configured callers; those with caps of their own
	// (max_in_flight, requests_per_minute) are admitted through them.
	Callers []classify.Caller
	Log     *slog.Logger
	// Registry gets admission's metric families (meterproxy_queue_depth,
	// meterproxy_in_flight, meterproxy_store_*, …).
	Registry prometheus.Registerer
}

// Request is one request to admit.
type Request struct {
	// Pool names the pool it draws on; "" (or a pool not configured) is
	// the account. The account is the only pool for now.
	Pool  string
	Class classify.Class
	// Caller is the configured caller's name, or classify.UnknownCaller.
	Caller string
	// Tokens is the request's token estimate, charged at admission when
	// account.tokens_per_minute is enforced (Lease.Correct settles it).
	Tokens int64
}

// New returns the Admitter cfg describes. It does not wait for Redis: a
// Redis that is down at start is a degraded store, not a failure to start
// (see Warm). Close it when done.
func New(cfg Config, d Deps) (*Admitter, error) {
	backend, err := openBackend(cfg, d.Log)
	if err != nil {
		return nil, err
	}
	account := newLimiter(cfg, cfg.Enforced(), capsOf(d.Callers), backend.Store, backend.Heartbeat, d.Log)
	account.pool = accountPool
	if backend.Shared {
		account.enablePrefetch() // a Redis round trip per admission is worth saving
	}
	a := &Admitter{backend: backend, limiter: account, pools: map[string]*limiter{accountPool: account}}
	registerMetrics(d.Registry, a)
	return a, nil
}

// Warm connects to Redis and loads the script before the first request;
// see backend.Warm. It does nothing in process.
func (a *Admitter) Warm(ctx context.Context) { a.backend.Warm(ctx, a.backend.log) }

// Admit waits until req may go upstream and returns its Lease, which the
// caller must Release when the upstream exchange ends. It returns a
// *RefusedError when a queue is full or max_wait passes (Caller set when
// the caller's own cap refused), ErrStoreUnavailable when the store failed
// under on_error "closed", ErrClosed after Run has stopped, or the
// context's error if ctx ends first.
func (a *Admitter) Admit(ctx context.Context, req Request) (*Lease, error) {
	return a.pool(req.Pool).Admit(ctx, req)
}

// pool is the limiter of the pool named name: the account's when name is
// not configured.
func (a *Admitter) pool(name string) *limiter {
	if l, ok := a.pools[name]; ok {
		return l
	}
	return a.limiter
}

// Observe records what the upstream said at at about pool (as Request.Pool
// names it), in answer to a request drawn on it: hold bulk for hold
// (remaining below the reserve), and for throttle (a 429's retry hint).
// The fleet hears of it with the next store call.
func (a *Admitter) Observe(pool string, at time.Time, hold, throttle time.Duration) {
	a.pool(pool).Observe(at, hold, throttle)
}

// Reconfigure applies a reloaded configuration: classes, limits and the
// callers' caps. Requests waiting or in flight keep their place and slot;
// see limiter.Reconfigure.
func (a *Admitter) Reconfigure(cfg Config, callers []classify.Caller) {
	caps := capsOf(callers)
	for _, l := range a.pools {
		l.Reconfigure(cfg, cfg.Enforced(), caps)
	}
}

// Run serves every pool's queues until ctx ends, then refuses every
// waiter with ErrClosed and tells the store what is still in flight. Call
// it once.
func (a *Admitter) Run(ctx context.Context) error {
	var g errgroup.Group
	for _, l := range a.pools {
		g.Go(func() error { return l.Run(ctx) })
	}
	return g.Wait()
}

// Close stops probing Redis and closes its client. Call it after Run
// returns.
func (a *Admitter) Close() error { return a.backend.Close() }

// InFlightLimit returns the in-flight bound the store enforces now: the
// fleet's with Redis, this replica's in process.
func (a *Admitter) InFlightLimit() int64 { return a.limiter.InFlightLimit() }

// State is admission's live numbers, for /admin/state.
type State struct {
	// Store is the store's kind and health.
	Store StoreState `json:"store"`
	// Window is the current second's use, by class (index 0 interactive).
	Window WindowUse `json:"window"`
	// InFlight, FleetInFlight and Queued are by class name.
	InFlight      map[string]int64 `json:"in_flight"`
	FleetInFlight map[string]int64 `json:"fleet_in_flight"`
	Queued        map[string]int   `json:"queued"`
	// UpstreamHoldSeconds is how much longer bulk is held on the upstream's word.
	UpstreamHoldSeconds float64 `json:"upstream_hold_seconds"`
	// Caps are the capped callers' numbers, by caller name.
	Caps map[string]CapState `json:"caps"`
}

// StoreState is the store part of State.
type StoreState struct {
	Mode     string `json:"mode"` // in-process or redis
	Degraded bool   `json:"degraded"`
}

// State returns admission's live numbers. Safe for concurrent use.
func (a *Admitter) State() State {
	mode := "in-process"
	if a.backend.Shared {
		mode = "redis"
	}
	st := State{
		Store:               StoreState{Mode: mode, Degraded: a.backend.Degraded()},
		Window:              a.limiter.Window(),
		InFlight:            map[string]int64{},
		FleetInFlight:       map[string]int64{},
		Queued:              map[string]int{},
		UpstreamHoldSeconds: a.limiter.UpstreamHold().Seconds(),
		Caps:                a.limiter.capState(),
	}
	for _, c := range classify.Classes {
		st.InFlight[c.String()] = a.limiter.InFlight(c)
		st.FleetInFlight[c.String()] = a.limiter.FleetInFlight(c)
		st.Queued[c.String()] = a.limiter.Queued(c)
	}
	return st
}
