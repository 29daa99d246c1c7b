package quota

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Admitter is quota's entry point: it admits each request through its
// caller's gates (its cap, if it has one), then against its pool — its
// class's share of the one-second windows and the in-flight bound — over
// the store the configuration names (in process, or Redis for a fleet). It is safe for concurrent use. Admit may be called before Run
// starts; waiters are served once it does.
type Admitter struct {
	backend *backend
	log     *slog.Logger
	// cfg is the configuration in force, for PoolFor; routing is what it
	// says of the accounts, for Admit (route.go).
	cfg     atomic.Pointer[Config]
	routing atomic.Pointer[routing]
	// observers are what its metrics read besides the pools.
	observers

	mu sync.Mutex
	// pools are the pools' limiters, by pool name (pool.go), the account's
	// under accountPool; Reconfigure adds and removes model pools.
	pools map[string]*poolRun
	// caps is the callers' caps, one gate in front of every pool;
	// batches holds the spend budgets' gate (budgets) and the batches
	// reserved on them; gates are every caller gate a request passes, in
	// order (caps first).
	caps *gate.CapGate
	batches
	gates gate.Gate
	// run is Run's context once it has started; nil before.
	run context.Context
	wg  sync.WaitGroup
}

// observers are what an Admitter's metrics read besides its pools:
// onStoreCall observes every pool's store calls; shadow says its
// decisions are shadow mode's (SetShadow), for the gauges' mode label.
type observers struct {
	onStoreCall func(time.Duration, error)
	shadow      atomic.Bool
}

// SetShadow says whether the proxy runs in mode shadow, where every
// admission is a shadow decision (Simulate): the gauges of queues, slots
// and windows carry it as their mode label (shadow or enforce), so
// simulated numbers are never read as enforcement's.
func (a *Admitter) SetShadow(shadow bool) { a.shadow.Store(shadow) }

// mode is the gauges' mode label.
func (o *observers) mode() string {
	if o.shadow.Load() {
		return "shadow"
	}
	return "enforce"
}

// poolRun is one pool's limiter and how to stop it.
type poolRun struct {
	l    *limiter
	stop context.CancelFunc // nil until it runs
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

// New returns the Admitter cfg describes. It does not wait for Redis: a
// Redis that is down at start is a degraded store, not a failure to start
// (see Warm). Close it when done.
func New(cfg Config, d Deps) (*Admitter, error) {
	backend, err := openBackend(cfg, d.Log)
	if err != nil {
		return nil, err
	}
	a := &Admitter{backend: backend, log: d.Log, pools: map[string]*poolRun{},
		caps: gate.NewCapGate(backend.Caps, backend.Heartbeat, d.Log)}
	if backend.failover != nil {
		backend.failover.Observe = a.observeStoreCall
	}
	a.batches = batches{files: backend.Batches, config: &a.cfg,
		budgets: gate.NewBudgetGate(backend.Budgets, backend.Batches, backend.BudgetsAlive, cfg.Store.Heartbeat, d.Log)}
	a.gates = gate.Chain{a.caps, a.budgets} // caps first: a request waiting at its cap holds no reservation
	a.Reconfigure(cfg, d.Callers)           // builds every pool
	registerMetrics(d.Registry, a)
	return a, nil
}

// observeStoreCall passes a store call to the metrics, once registered.
func (a *Admitter) observeStoreCall(d time.Duration, err error) {
	if f := a.onStoreCall; f != nil {
		f(d, err)
	}
}

// poolIDs are cfg's pools (PoolID), each with the Config it enforces:
// every account's own, then its account.models' in order.
func poolIDs(cfg Config) map[string]Config {
	ids := map[string]Config{}
	for _, account := range accountNames(cfg) {
		ac := cfg.ForAccount(account)
		ids[store.PoolID(account, store.AccountPool)] = ac.Pool(store.AccountPool)
		for _, m := range ac.Account.Models {
			ids[store.PoolID(account, m.Name)] = ac.Pool(m.Name)
		}
	}
	return ids
}

// newLimiter returns a limiter enforcing pc, as pool name.
func (a *Admitter) newLimiter(pc Config, name string) *limiter {
	l := newLimiter(pc, pc.Enforced(), a.backend.Store, a.backend.Heartbeat, a.log)
	l.loop.pool = name
	l.adapt.store, l.adapt.pool = a.backend.Adapt, name
	l.adapt.log = a.log.With(poolLogAttrs(name)...) // its logs name the pool
	if a.backend.failover == nil {                  // with Redis, the failover store observes its calls
		l.OnStoreCall(a.observeStoreCall)
	}
	if a.backend.Shared {
		l.enablePrefetch() // a Redis round trip per admission is worth saving
	}
	return l
}

// PoolFor names the pool a request draws on under the configuration in
// force, at the first account (PoolAt).
func (a *Admitter) PoolFor(model func() Model) string {
	return a.PoolAt(accountNames(*a.cfg.Load())[0], model)
}

// PoolAt names the pool a request draws on at account under the
// configuration in force: the first of the account's models entries that
// matches its model, else the account's own (""). model is only called
// when there are pools to match, so a request pays for finding its model
// only then.
func (a *Admitter) PoolAt(account string, model func() Model) string {
	cfg, ok := a.routing.Load().accounts[account]
	if !ok || len(cfg.Account.Models) == 0 {
		return store.AccountPool
	}
	return cfg.PoolFor(model())
}

// Warm connects to Redis and loads the script before the first request;
// see backend.Warm. It does nothing in process.
func (a *Admitter) Warm(ctx context.Context) {
	a.backend.Warm(ctx, a.backend.log)
	if a.budgets.Budgeted() {
		a.backend.checkPersistence(ctx)
	}
}

// Admit waits until req may go upstream and returns its Lease, which the
// caller must Release when the upstream exchange ends. What req costs in
// its pool — requests, and its tokens only where the pool enforces them —
// is decided here, whatever req's estimate. It returns a
// *ChargeTooLargeError at once, charging nothing, when req's tokens are
// more than one request may be charged in its pool (MaxCharge), a
// *gate.RefusedError when a queue is full or max_wait passes (Caller set when
// the caller's own cap refused), store.ErrStoreUnavailable when the store failed
// under on_error "closed", gate.ErrClosed after Run has stopped, or the
// context's error if ctx ends first.
func (a *Admitter) Admit(ctx context.Context, req Request) (*Lease, error) {
	cfg := a.cfg.Load()
	var buf [maxRoutes]route
	routes, err := a.routes(a.routing.Load(), req, buf[:0])
	if err != nil {
		return nil, err
	}
	p := req.Model.priceIn(cfg.Prices)
	if p != nil {
		req.cost, req.floor = reservation(p, req)
		req.priced = true
	}
	lease, err := admitThrough(ctx, a.gates, routes, req, cfg.Classes.maxWait(req.Class))
	if err == nil && p != nil {
		lease.price, lease.worst = p, req.cost
	}
	return lease, err
}

// Simulate is Admit for a shadow decision (mode: shadow), beside a
// request forwarded at once: it waits, and is granted or refused, as
// Admit would decide — in its pool's queue and window, under its
// caller's cap and max_queue, its wait ended at max_wait or when ctx
// ends — but its budgets are only asked whether they would refuse it at
// what they have spent: it reserves nothing there, and its lease
// charges them nothing (Charge charges the forwarded request's cost).
// Release its lease; never Settle it.
func (a *Admitter) Simulate(ctx context.Context, req Request) (*Lease, error) {
	req.simulated = true
	return a.Admit(ctx, req)
}

// Charge charges cost, spent by req forwarded without admission (mode:
// shadow), to its caller's and class's budgets whatever they have left,
// past their limits if need be: the provider spent it. A Free request
// charges nothing.
func (a *Admitter) Charge(req Request, cost price.Nanodollars) {
	if req.Free || cost <= 0 {
		return
	}
	a.budgets.ChargePass(req.Caller, req.Class).Settle(cost)
}

// WorstCase is the most req may cost at the prices in force
// (price.Price.WorstCase), and whether a price matched its model: for a
// response that cannot say what it cost and that no Lease priced.
func (a *Admitter) WorstCase(req Request) (price.Nanodollars, bool) {
	p := req.Model.priceIn(a.cfg.Load().Prices)
	if p == nil {
		return 0, false
	}
	return p.WorstCase(req.InputTokens, p.OutputCap(req.OutputTokens, req.Generations), req.Tier), true
}

// Cost prices usage u of a response for model m at the prices in force,
// and reports whether a price matched m: for a response no Lease priced
// (Lease.Settle prices the rest at the prices of their admission).
func (a *Admitter) Cost(m Model, u price.Usage) (price.Nanodollars, bool) {
	p := m.priceIn(a.cfg.Load().Prices)
	if p == nil {
		return 0, false
	}
	return p.Cost(u), true
}

// admitThrough admits req through gate, then at one of routes (its pool
// at each account it may go to; admitRouted): the caller's gate first,
// waiting within the class's maxWait, then the pool within what is left
// of it. The Lease releases both.
func admitThrough(ctx context.Context, gate gate.Gate, routes []route, req Request, maxWait time.Duration) (*Lease, error) {
	req.until = time.Now().Add(maxWait)
	p, err := gate.Start(ctx, req.gate(), req.until)
	if err != nil {
		return nil, err
	}
	lease, err := admitRouted(ctx, routes, req)
	if err != nil {
		p.Release()
		return nil, err
	}
	lease.gate, lease.until = p, req.until
	return lease, nil
}

// pool is the limiter of the pool whose id is id (PoolID): its account's
// own pool when id's pool is not configured, and the first account's when
// its account is not either.
func (a *Admitter) pool(id string) *limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pools[id]; ok {
		return p.l
	}
	account, _ := store.SplitPoolID(id)
	if p, ok := a.pools[store.PoolID(account, store.AccountPool)]; ok {
		return p.l
	}
	return a.firstLocked()
}

// firstLocked is the first account's own pool: the one account's, or
// upstream.accounts[0]'s.
func (a *Admitter) firstLocked() *limiter {
	return a.pools[store.PoolID(accountNames(*a.cfg.Load())[0], store.AccountPool)].l
}

// Observe records what the upstream said at at about pool (as PoolAt
// names it) of account (as Lease.Account names it), in answer to a
// request drawn on it: hold bulk for hold (remaining below the reserve),
// and for throttle (a 429's retry hint). The fleet hears of it with the
// next store call.
func (a *Admitter) Observe(account, pool string, at time.Time, hold, throttle time.Duration) {
	a.pool(store.PoolID(account, pool)).Observe(at, hold, throttle)
}

// Reconfigure applies a reloaded configuration: classes, limits, the
// callers' caps and the pools. Requests waiting or in flight in a pool
// that stays keep their place and slot (see limiter.Reconfigure); a new
// pool starts serving at once; a removed pool's waiters are refused with
// ErrPoolRemoved — their model now draws on another pool, under limits
// they were never queued for, so they are answered with a retry hint
// rather than moved — and its requests in flight finish as they are.
func (a *Admitter) Reconfigure(cfg Config, callers []classify.Caller) {
	caps, weights := gate.CapsOf(callers), weightsOf(callers)
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := poolIDs(cfg)
	for name, pc := range keep {
		p, ok := a.pools[name]
		if ok {
			p.l.Reconfigure(pc, pc.Enforced())
		} else {
			p = &poolRun{l: a.newLimiter(pc, name)}
			a.pools[name] = p
			a.startLocked(p)
		}
		p.l.setWeights(weights)
	}
	a.caps.Reconfigure(cfg.Classes.gates(), cfg.Account.ExpectedReplicas, caps)
	a.budgets.Reconfigure(cfg.Classes.gates(), callers)
	a.routing.Store(newRouting(cfg))
	a.cfg.Store(&cfg) // requests resolve to the new pools only once they exist
	for name, p := range a.pools {
		if _, ok := keep[name]; !ok {
			delete(a.pools, name)
			p.l.closeWith(ErrPoolRemoved)
			if p.stop != nil {
				p.stop()
			}
		}
	}
}

// Run serves every pool's queues until ctx ends, then refuses every
// waiter with gate.ErrClosed and tells the store what is still in flight. Call
// it once.
func (a *Admitter) Run(ctx context.Context) error {
	a.mu.Lock()
	a.run = ctx
	for _, p := range a.pools {
		a.startLocked(p)
	}
	a.wg.Go(func() { _ = a.caps.Run(ctx) })                           // it returns nil when ctx ends
	a.wg.Go(func() { _ = a.budgets.Run(ctx); a.backend.saveSpend() }) // its last settles, then the file
	a.wg.Go(func() { a.backend.keepSpend(ctx) })
	a.mu.Unlock()
	<-ctx.Done()
	a.wg.Wait()
	return nil
}

// startLocked runs p's limiter under Run's context, if Run has started.
func (a *Admitter) startLocked(p *poolRun) {
	if a.run == nil {
		return
	}
	ctx, stop := context.WithCancel(a.run)
	p.stop = stop
	a.wg.Go(func() {
		defer stop()
		_ = p.l.Run(ctx) // it returns nil when ctx ends
	})
}

// Close stops probing Redis and closes its client. Call it after Run
// returns.
func (a *Admitter) Close() error { return a.backend.Close() }

// InFlightLimit returns the in-flight bound the store enforces, every
// pool's together: the fleet's with Redis, this replica's in process; for
// a pool with an adaptive bound, its ceiling (max_in_flight). It sizes the
// upstream transport.
func (a *Admitter) InFlightLimit() int64 {
	var n int64
	a.eachPool(func(_ string, l *limiter) { n += l.inFlightCeiling() })
	return n
}

// State returns admission's live numbers. Safe for concurrent use.
func (a *Admitter) State() State {
	mode := "in-process"
	if a.backend.Shared {
		mode = "redis"
	}
	st := State{
		Store:     storeState{Mode: mode, Degraded: a.backend.Degraded()},
		PoolState: a.first().state(),
		Caps:      a.caps.States(),
		Pools:     map[string]PoolState{},
		Budgets:   a.budgets.State(),
	}
	a.eachPool(func(id string, l *limiter) { st.Pools[stateName(id)] = l.state() })
	for _, acct := range a.cfg.Load().Accounts {
		st.Accounts = append(st.Accounts, accountState{Name: acct.Name, Serves: acct.Serves, LendsTo: acct.LendsTo})
	}
	return st
}

// first is the first account's own pool (firstLocked).
func (a *Admitter) first() *limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstLocked()
}

// Pools are the pools' labels as metrics name them, in no particular
// order.
func (a *Admitter) Pools() []Labels {
	var pools []Labels
	a.eachPool(func(id string, _ *limiter) { pools = append(pools, poolLabels(id)) })
	return pools
}

// HomeAccount is the account a request of class c goes to first among
// accounts (Request.Accounts; nil is every account): the first that
// serves it (or, with none, lends to it); "" for the one account of a
// configuration without upstream.accounts, or when none of accounts
// serves or lends to c.
func (a *Admitter) HomeAccount(c classify.Class, accounts []string) string {
	for _, account := range a.routing.Load().candidates[c] {
		if among(accounts, account) {
			return account
		}
	}
	return ""
}

// eachPool calls f for every pool, by its id (PoolID), in no particular
// order.
func (a *Admitter) eachPool(f func(id string, l *limiter)) {
	a.mu.Lock()
	pools := make(map[string]*limiter, len(a.pools))
	for id, p := range a.pools {
		pools[id] = p.l
	}
	a.mu.Unlock()
	for id, l := range pools {
		f(id, l)
	}
}

// FlexFor is Config.FlexFor under the configuration in force.
func (a *Admitter) FlexFor(cl classify.Class, model func() Model) (Flex, bool) {
	return a.cfg.Load().FlexFor(cl, model)
}

// Unheld returns the Lease of a request the provider began without
// asking: granted at once at req's account (req.Account), in the pool its
// model draws on there (PoolAt),
// whatever the pool's windows and in-flight bound, its caller's cap and
// its budgets hold — nothing can hold it. It counts in flight until
// Released. Its token charge at admission is 0: Settle adds what it
// reported to the pool's window (in every dialect: nothing was charged
// for it before), and charges its cost to its caller's and class's
// budgets whatever they have left, past their limit if need be (the
// provider spent it) — its worst case at req's input and output when
// its usage is Worst.
func (a *Admitter) Unheld(req Request) *Lease {
	cfg := a.cfg.Load()
	pool := a.routing.Load().accounts[req.Account].PoolFor(req.Model)
	l := a.pool(store.PoolID(req.Account, pool))
	s := &Lease{leases: &l.leases, class: req.Class, account: req.Account, pool: pool}
	if p := req.Model.priceIn(cfg.Prices); p != nil {
		s.price, s.worst = p, p.WorstCase(req.InputTokens, p.OutputCap(req.OutputTokens, req.Generations), req.Tier)
	}
	if !req.Free {
		s.gate = a.budgets.ChargePass(req.Caller, req.Class)
	}
	l.leases.admit(req.Class)
	return l.grant(s)
}

// CheckBudgets reports whether req's caller's and class's budgets refuse
// anything of it now, whatever it costs: a budget spent this period (a
// *gate.BudgetExceededError whose Cost is 0), its model unpriced under a
// budget that refuses unpriced models (*gate.UnpricedModelError), its API
// unmetered under one that refuses those (*gate.UnmeteredAPIError); or
// store.ErrStoreUnavailable when the store cannot say. It reserves nothing: a
// Realtime session's opening asks it, before any of its requests, which
// are admitted each as any other.
func (a *Admitter) CheckBudgets(ctx context.Context, req Request) error {
	r := req.gate()
	r.Priced = req.Model.priceIn(a.cfg.Load().Prices) != nil
	return a.budgets.Check(ctx, r)
}
