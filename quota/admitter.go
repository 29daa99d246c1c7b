package quota

import (
	"context"
	"log/slog"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
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
	limiter := newLimiter(cfg, cfg.Enforced(), capsOf(d.Callers), backend.Store, backend.Heartbeat, d.Log)
	if backend.Shared {
		limiter.enablePrefetch() // a Redis round trip per admission is worth saving
	}
	a := &Admitter{backend: backend, limiter: limiter}
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
	return a.limiter.Admit(ctx, req)
}

// Observe records what the upstream said at at about the account: hold
// bulk for hold (remaining below the reserve), and for throttle (a 429's
// retry hint). The fleet hears of it with the next store call.
func (a *Admitter) Observe(at time.Time, hold, throttle time.Duration) {
	a.limiter.Observe(at, hold, throttle)
}

// Reconfigure applies a reloaded configuration: classes, limits and the
// callers' caps. Requests waiting or in flight keep their place and slot;
// see limiter.Reconfigure.
func (a *Admitter) Reconfigure(cfg Config, callers []classify.Caller) {
	a.limiter.Reconfigure(cfg, cfg.Enforced(), capsOf(callers))
}

// Run serves the queues until ctx ends, then refuses every waiter with
// ErrClosed and tells the store what is still in flight. Call it once.
func (a *Admitter) Run(ctx context.Context) error { return a.limiter.Run(ctx) }

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
