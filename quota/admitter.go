package quota

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/quota/gate"

	"github.com/meterproxy/meterproxy/quota/store"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/prometheus/client_golang/prometheus"
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
	// onStoreCall observes every pool's store calls (metrics).
	onStoreCall func(time.Duration, error)

	mu sync.Mutex
	// pools are the pools' limiters, by pool name (pool.go), the account's
	// under accountPool; Reconfigure adds and removes model pools.
	pools map[string]*poolRun
	// caps is the callers' caps, one gate in front of every pool; gates
	// are every caller gate a request passes, in order (caps first).
	caps    *gate.CapGate
	budgets *gate.BudgetGate
	gates   gate.Gate
	// run is Run's context once it has started; nil before.
	run context.Context
	wg  sync.WaitGroup
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

// Request is one request to admit.
type Request struct {
	Class classify.Class
	// Caller is the configured caller's name, or classify.UnknownCaller.
	Caller string
	// Anonymous tells unknown callers apart for fair queuing
	// (classify.Result.Anonymous); 0 for a configured caller or none.
	Anonymous uint64
	// Tokens is what the provider would charge the request, as the caller
	// estimates it. Admit charges it to the token window of the request's
	// pool when that pool enforces tokens (its own tokens_per_minute), and
	// nothing there otherwise (Config.charge); Lease.Settle settles it.
	Tokens int64
	// Model is the request's model, which prices it for its budgets.
	Model Model
	// InputTokens and OutputTokens are what the request may cost in
	// tokens at most, for its budgets: its input estimate, and its output
	// cap (0: none set, and the price's max_output counts), its
	// max_tokens times Generations.
	InputTokens, OutputTokens int64
	// Generations is how many answers the request asks the model for (n,
	// best_of; 0 counts as 1): a price's max_output caps each of them
	// (price.Price.OutputCap).
	Generations int64
	// HiddenInput says the provider may bill it input its body does not
	// show (usage.Request.HiddenInput): its budgets reserve its input at
	// its price's max_input, and cut that to what they have left rather
	// than refuse it (reservation, budgetcut.go). LongContext says
	// it asks for a context beyond its model family's (Anthropic's
	// context-1m beta): an unset max_input is then price.FallbackMaxInput.
	HiddenInput, LongContext bool
	// Tier is the service tier the request is sent at ("flex" or "").
	Tier string
	// Free says the request costs this account nothing, so no budget
	// holds it: it generates nothing (a read, a delete, a token count),
	// or it spends another account (a pass-through caller's own key).
	// The zero value may cost money.
	Free bool
	// Unmetered says the request may cost money on an API whose answers
	// report no usage the proxy reads (images, audio): a budget
	// refuses it unless its unpriced_apis is worst_case, and then it is
	// settled at its worst case (Lease.Settle, Usage.Worst).
	Unmetered bool
	// Account, when Pinned, is the one account the request may be
	// admitted at, whatever else its class may borrow from: a WebSocket
	// turn's, whose connection goes to one account. It must be one its
	// class may go to (HomeAccount is).
	Account string
	Pinned  bool
	// until, when set, ends the wait before the class's max_wait: what is
	// left of it after the caller's gates (admitThrough).
	until time.Time
	// pool is the pool it draws on at the account a route admits it at,
	// picked there from Model (Config.PoolFor) and set by the route
	// (route.admit): the one place a pool is chosen. "" is the account's.
	pool string
	// cost and priced are its worst case at its model's price, and
	// whether a price matched its model; floor the least its budgets may
	// cut the reservation of cost to (reservation). Admit sets them.
	cost, floor price.Nanodollars
	priced      bool
}

// gate is what the caller gates know of r.
func (r Request) gate() gate.Request {
	return gate.Request{Caller: r.Caller, Class: r.Class, Cost: r.cost, Floor: r.floor, Priced: r.priced, Model: r.Model.Name, Generates: !r.Free,
		Unmetered: r.Unmetered}
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
	a.budgets = gate.NewBudgetGate(backend.Budgets, backend.Batches, backend.BudgetsAlive, cfg.Store.Heartbeat, d.Log)
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
	for _, account := range cfg.accountNames() {
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
	return a.PoolAt(a.cfg.Load().accountNames()[0], model)
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
func (a *Admitter) Warm(ctx context.Context) { a.backend.Warm(ctx, a.backend.log) }

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
	return a.pools[store.PoolID(a.cfg.Load().accountNames()[0], store.AccountPool)].l
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

// State is admission's live numbers, for /admin/state: the account's
// pool at the top level, every pool (the account's as "default") under
// Pools.
type State struct {
	// Store is the store's kind and health.
	Store storeState `json:"store"`
	PoolState
	// Caps are the capped callers' numbers, by caller name.
	Caps map[string]gate.CapState `json:"caps"`
	// Pools are every pool's numbers, by name; the account's is "default",
	// and with several accounts each is named after its account's name and
	// a slash ("chat-project/default"; stateName).
	Pools map[string]PoolState `json:"pools"`
	// Budgets are the spend budgets' current periods, as of the budget
	// gate's last read (at most a store heartbeat old).
	Budgets []gate.BudgetState `json:"budgets"`
	// Accounts are upstream.accounts in order, with the classes each
	// serves and lends to (their pools are in Pools, as
	// "<account>/<pool>"); absent with one account.
	Accounts []accountState `json:"accounts,omitempty"`
}

// accountState is one of upstream.accounts as /admin/state shows it.
type accountState struct {
	Name    string           `json:"name"`
	Serves  []classify.Class `json:"serves"`
	LendsTo []classify.Class `json:"lends_to"`
}

// PoolState is one pool's live numbers.
type PoolState struct {
	// Window is the current second's use, by class (index 0 interactive).
	Window store.WindowUse `json:"window"`
	// InFlight, FleetInFlight and Queued are by class name.
	InFlight      map[string]int64 `json:"in_flight"`
	FleetInFlight map[string]int64 `json:"fleet_in_flight"`
	Queued        map[string]int   `json:"queued"`
	// InFlightLimit is the in-flight bound the store enforces.
	InFlightLimit int64 `json:"in_flight_limit"`
	// UpstreamHoldSeconds is how much longer bulk is held on the upstream's word.
	UpstreamHoldSeconds float64 `json:"upstream_hold_seconds"`
	// Adaptive is the adaptive bound's view; absent without
	// adaptive_in_flight.
	Adaptive *adaptiveState `json:"adaptive,omitempty"`
}

// adaptiveState is a pool's adaptive in-flight bound as /admin/state shows
// it: the bound in force between its floor and ceiling, the controller's
// phase, its last decision and why, and the last measurement it judged.
type adaptiveState struct {
	Bound   int64  `json:"bound"`
	Floor   int64  `json:"floor"`
	Ceiling int64  `json:"ceiling"`
	Phase   string `json:"phase"`
	// LastDecision is the last step's action, its move and its reason.
	LastDecision adaptiveDecision `json:"last_decision"`
	// WorkPerSecond and LatencySecondsPerWork are the last judged
	// measurement (0 before the first).
	WorkPerSecond         float64 `json:"work_per_second"`
	LatencySecondsPerWork float64 `json:"latency_seconds_per_work"`
}

// adaptiveDecision is one step of an adaptive bound: its action, the
// bound before and after, and why.
type adaptiveDecision struct {
	Action string `json:"action"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	Why    string `json:"why"`
}

// storeState is the store part of State.
type storeState struct {
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

// HomeAccount is the account a request of class c goes to first: the
// first that serves it (or, with none, lends to it); "" for the one
// account of a configuration without upstream.accounts.
func (a *Admitter) HomeAccount(c classify.Class) string {
	if cands := a.routing.Load().candidates[c]; len(cands) > 0 {
		return cands[0]
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

// state is l's live numbers.
func (l *limiter) state() PoolState {
	st := PoolState{
		Window:              l.Window(),
		InFlight:            map[string]int64{},
		FleetInFlight:       map[string]int64{},
		Queued:              map[string]int{},
		InFlightLimit:       l.InFlightLimit(),
		UpstreamHoldSeconds: l.UpstreamHold().Seconds(),
	}
	if set := l.limits.Load(); set.adaptive != nil {
		view, _ := l.adapt.view()
		d := view.Last
		st.Adaptive = &adaptiveState{Bound: set.enforced.InFlight, Floor: int64(set.adaptive.Clamp(0)), Ceiling: set.ceiling,
			Phase: string(view.State.Phase), WorkPerSecond: view.Judged.Work, LatencySecondsPerWork: view.Judged.Latency,
			LastDecision: adaptiveDecision{Action: string(d.Action), From: int64(d.From), To: int64(d.To), Why: d.Why}}
	}
	for _, c := range classify.Classes {
		st.InFlight[c.String()] = l.InFlight(c)
		st.FleetInFlight[c.String()] = l.FleetInFlight(c)
		st.Queued[c.String()] = l.Queued(c)
	}
	return st
}
