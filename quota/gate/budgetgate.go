package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

var _ Gate = (*BudgetGate)(nil)

// budgetPoll is how often a request waiting at a budget asks the store
// again: reservations settled on other replicas send no signal here.
const budgetPoll = 250 * time.Millisecond

// budgetMaxPending is how many settles and releases may wait for a store
// that fails before a request with a budget is refused without asking
// it: each failed reserve queues a release, and an outage must not grow
// the queue without bound.
const budgetMaxPending = 1024

// BudgetGate is the spend budgets (callers[].budget, classes.<class>.
// budget) as a Gate: a request with a budget reserves its worst-case
// cost on each of its budgets at once before it waits for its pool, and
// settles to its priced usage when it ends — so concurrent requests, on
// one replica or a fleet, can never together spend more than a budget
// allows. A request whose worst case fits what is unspent but not beside
// what others hold reserved waits (within its max_wait) for them to
// settle; one that does not fit what is unspent is refused at once.
//
// Settling is the gate loop's (Run): a request's end never waits on the
// store, and a settle the store failed is tried again (the store makes a
// repeated settle change nothing). A reservation whose reserve failed
// may have been made all the same (its answer lost): the loop releases
// it. While maxPending settles wait for a store that fails, a request
// with a budget is refused without asking it. Safe for concurrent use;
// Start may be called before Run, and settles are made once it runs.
type BudgetGate struct {
	store BudgetStore
	// batches keeps the batches' files and records (budgetbatch.go).
	batches BatchStore
	// alive, when set (Redis), tells the store this replica's
	// reservations are alive; called every heartbeat while it holds any.
	alive     func(context.Context) error
	heartbeat time.Duration
	now       func() time.Time
	log       *slog.Logger
	budgets   atomic.Pointer[budgetSet]
	seq       atomic.Uint64
	// held counts this replica's reservations not settled yet; waiting
	// the requests waiting at a budget, by class (each asks the store
	// every budgetPoll, so they are bounded by the class's max_queue).
	held    atomic.Int64
	waiting [classify.NumClasses]atomic.Int64
	// budgetLoop is what the gate's loop (Run) keeps.
	budgetLoop
}

// budgetLoop is the state of a BudgetGate's loop: the settles it has yet
// to make and what it last read.
type budgetLoop struct {
	// kick wakes the loop to settle.
	kick chan struct{}
	// maxPending bounds the settles waiting for the store
	// (budgetMaxPending).
	maxPending int

	mu sync.Mutex
	// pending are the settles the loop has yet to make.
	pending []budgetSettle
	// settled is closed, and replaced, when the loop settled something:
	// it wakes the requests waiting at a budget.
	settled chan struct{}
	// seen is every configured budget's current period as the loop last
	// read it, for metrics and /admin/state; enqueuedSeen the batch
	// tokens enqueued.
	seen         []BudgetState
	enqueuedSeen []BatchEnqueued
}

// BudgetState is one budget's current period as /admin/state and the
// metrics show it, in dollars.
type BudgetState struct {
	Budget   string    `json:"budget"` // caller:<name> or class:<class>
	Period   string    `json:"period"` // 2026-12 or 2026-12-01 (UTC)
	Limit    float64   `json:"limit_usd"`
	Spent    float64   `json:"spent_usd"`
	Reserved float64   `json:"reserved_usd"` // held by requests in flight
	Alert    float64   `json:"alert_usd"`    // the budget's alert_at share
	Resets   time.Time `json:"resets"`
}

// alertUSD is the spend at which a budget of usd alerts at share, to the
// micro-dollar: 3 × 0.8 is 2.4, not the float product 2.4000000000000004.
func alertUSD(usd, share float64) float64 { return math.Round(usd*share*1e6) / 1e6 }

// BudgetRefresh is how often the loop reads every budget's spend for the
// metrics, when no heartbeat is configured.
const BudgetRefresh = time.Second

// refresh reads every configured budget's spend into seen, and the
// enqueued batch tokens.
func (g *BudgetGate) refresh(ctx context.Context) {
	g.refreshEnqueued(ctx)
	bs := g.budgets.Load().all()
	keys := periods(bs, g.now())
	var seen []BudgetState
	if len(keys) > 0 {
		uses, err := g.store.read(ctx, keys)
		if err != nil {
			return // the last view stands
		}
		for i, k := range keys {
			seen = append(seen, BudgetState{Budget: k.Budget, Period: k.Period, Limit: k.Limit.Dollars(),
				Spent: uses[i].Spent.Dollars(), Reserved: uses[i].Reserved.Dollars(), Alert: alertUSD(bs[i].USD, bs[i].Alert()), Resets: k.Resets})
		}
	}
	g.mu.Lock()
	g.seen = seen
	g.mu.Unlock()
}

// State returns every configured budget as the loop last read it (at
// most a heartbeat old), by name. Safe for concurrent use.
func (g *BudgetGate) State() []BudgetState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// budgetSettle is one reservation to settle (to cost; 0 releases it), or,
// when job is set, a batch's step to take (budgetbatch.go).
type budgetSettle struct {
	keys []budgetKey
	id   string
	cost price.Nanodollars
	job  func(context.Context) error
}

// NewBudgetGate returns a gate over store, with no budgets until
// Reconfigure.
func NewBudgetGate(store BudgetStore, batches BatchStore, alive func(context.Context) error, heartbeat time.Duration, log *slog.Logger) *BudgetGate {
	g := &BudgetGate{store: store, batches: batches, alive: alive, heartbeat: heartbeat, now: time.Now, log: log,
		budgetLoop: budgetLoop{kick: make(chan struct{}, 1), maxPending: budgetMaxPending, settled: make(chan struct{})}}
	g.budgets.Store(&budgetSet{})
	return g
}

// Reconfigure puts cfg's class budgets and callers' budgets in force for
// the requests that start from now on; reservations already made settle
// where they were made.
func (g *BudgetGate) Reconfigure(cl Classes, callers []classify.Caller) {
	s := &budgetSet{callers: map[string]classify.Budget{}}
	for _, c := range callers {
		if c.Budget.Set() {
			s.callers[c.Name] = c.Budget
		}
	}
	s.classes = cl.Budget
	s.maxQueue = cl.MaxQueue
	g.budgets.Store(s)
}

// Start implements Gate.
func (g *BudgetGate) Start(ctx context.Context, r Request, until time.Time) (Pass, error) {
	set := g.budgets.Load()
	bs := set.of(r.Caller, r.Class)
	if len(bs) == 0 || !r.Generates {
		return Pass{}, nil
	}
	if r.Unmetered {
		for _, b := range bs {
			if !b.UnpricedAPIs.WorstCase() {
				return Pass{}, &UnmeteredAPIError{Budget: b.Name}
			}
		}
	}
	if !r.Priced {
		if err := Unpriced(bs, r.Model); err != nil {
			return Pass{}, err
		}
		return Pass{}, nil // every budget lets it through at $0
	}
	keys := periods(bs, g.now())
	if r.Simulated {
		return Pass{}, g.wouldRefuse(ctx, keys, newBudgetCut(r).floor)
	}
	id := g.nextID()
	held, err := g.reserve(ctx, set, keys, id, r, until)
	if err != nil {
		return Pass{}, err
	}
	return g.reservedPass(keys, id, held), nil
}

// nextID is a reservation id unique to this replica.
func (g *BudgetGate) nextID() string { return strconv.FormatUint(g.seq.Add(1), 36) }

// reserve reserves r.Cost (cut down to r.Floor where the budgets have
// less left: budgetcut.go) on keys (budgets of set) under id, waiting
// within until while others' reservations hold the room, and reports
// whether it waited. Once it returns nil the reservation is held
// (g.held counts it) until a settle of id. A reserve the store failed is
// released (releaseLost): its answer may be all that was lost.
func (g *BudgetGate) reserve(ctx context.Context, set *budgetSet, keys []budgetKey, id string, r Request, until time.Time) (bool, error) {
	res := newBudgetCut(r)
	held := false
	for {
		g.mu.Lock()
		settled, pending := g.settled, len(g.pending)
		g.mu.Unlock()
		if pending >= g.maxPending {
			return held, fmt.Errorf("%w: %d budget settles wait for the store", store.ErrStoreUnavailable, pending)
		}
		ans, err := res.reserve(ctx, g.store, keys, id)
		switch {
		case err != nil:
			g.releaseLost(keys, id)
			if ctx.Err() != nil {
				return held, context.Cause(ctx)
			}
			// A budget that cannot be counted refuses: spend is never
			// let past a budget, whatever store.on_error says.
			return held, errors.Join(store.ErrStoreUnavailable, err)
		case ans.Outcome == budgetReserved:
			g.held.Add(1)
			return held, nil
		case ans.Outcome == budgetExceeded:
			k := keys[ans.Refused]
			return held, &BudgetExceededError{Budget: k.Budget, Limit: k.Limit, Spent: ans.Use[ans.Refused].Spent,
				Cost: res.cost, Resets: k.Resets}
		}
		// budgetWait: others' reservations hold the room; they settle
		// below their worst case, or time out.
		if !held {
			if !r.Class.Valid() || g.waiting[r.Class].Add(1) > int64(set.maxQueue[r.Class]) {
				if r.Class.Valid() {
					g.waiting[r.Class].Add(-1)
				}
				return held, &RefusedError{Class: r.Class, Reason: ErrQueueFull, RetryAfter: time.Second}
			}
			defer g.waiting[r.Class].Add(-1)
			held = true
		}
		left := time.Until(until)
		if left <= 0 {
			return held, &RefusedError{Class: r.Class, Reason: ErrBudgetHeld, RetryAfter: time.Second}
		}
		t := time.NewTimer(min(left, budgetPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return held, context.Cause(ctx)
		case <-settled:
		case <-t.C:
		}
		t.Stop()
		res.reset() // others may have settled: the whole worst case may fit
	}
}

// reservedPass is the pass of reservation id on keys: its settle, or its
// release, hands the loop the settle, once.
func (g *BudgetGate) reservedPass(keys []budgetKey, id string, held bool) Pass {
	var once sync.Once
	settle := func(cost price.Nanodollars) {
		once.Do(func() { g.enqueue(budgetSettle{keys: keys, id: id, cost: cost}) })
	}
	return Pass{Held: held, HeldBy: HeldByBudget, OnRelease: func() { settle(0) }, OnSettle: settle}
}

// releaseLost hands the loop the release of reservation id, whose reserve
// failed: it may have been made all the same, its answer lost (a Redis
// that stalled past store.budget_timeout), and would hold its worst case
// until this replica stops. The loop makes it at its next tick, not at
// once: the store has just failed. If the reserve was never made, or is
// made after the release, the store changes nothing.
func (g *BudgetGate) releaseLost(keys []budgetKey, id string) {
	g.held.Add(1)
	g.mu.Lock()
	g.pending = append(g.pending, budgetSettle{keys: keys, id: id})
	g.mu.Unlock()
}

// enqueue hands a settle to the loop.
func (g *BudgetGate) enqueue(s budgetSettle) {
	g.mu.Lock()
	g.pending = append(g.pending, s)
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// budgetSettleTimeout bounds the settles made as the gate stops.
const budgetSettleTimeout = 2 * time.Second

// Run settles reservations as requests end, and keeps this replica's
// reservations alive in a shared store, until ctx ends; then it makes the
// settles still pending, within budgetSettleTimeout. It returns nil.
func (g *BudgetGate) Run(ctx context.Context) error {
	every := BudgetRefresh
	if g.heartbeat > 0 {
		every = g.heartbeat
	}
	t := time.NewTicker(every)
	defer t.Stop()
	g.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), budgetSettleTimeout)
			g.settlePending(stop)
			cancel()
			return nil
		case <-g.kick:
			g.settlePending(ctx)
		case <-t.C:
			if g.alive != nil && g.held.Load() > 0 {
				if err := g.alive(ctx); err != nil && ctx.Err() == nil {
					g.log.Warn("budget_store_failed", slog.String("error", err.Error()))
				}
			}
			g.settlePending(ctx) // and any that failed before
			if r, ok := g.store.(reconciler); ok {
				r.reconcile(ctx) // what was spent locally while the store failed
			}
			g.refresh(ctx)
		}
	}
}

// run makes settle s (and counts the reservation no longer held) or takes
// its job.
func (g *BudgetGate) run(ctx context.Context, s budgetSettle) error {
	if s.job != nil {
		return s.job(ctx)
	}
	if err := g.store.settle(ctx, s.keys, s.id, s.cost); err != nil {
		return err
	}
	g.held.Add(-1)
	return nil
}

// settlePending makes the pending settles, keeping those the store failed
// for the next try, and wakes the requests waiting at a budget.
func (g *BudgetGate) settlePending(ctx context.Context) {
	g.mu.Lock()
	todo := g.pending
	g.pending = nil
	g.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	var failed []budgetSettle
	for i, s := range todo {
		err := g.run(ctx, s)
		switch {
		case err == nil:
			continue
		case errors.Is(err, errBudgetBypassed):
			// Not made, and cost nothing (LocalBudgets): the others
			// (settles of local reservations) go on.
			failed = append(failed, s)
			continue
		case ctx.Err() == nil:
			g.log.Warn("budget_store_failed", slog.String("error", err.Error()))
		}
		failed = append(failed, todo[i:]...)
		break
	}
	g.mu.Lock()
	g.pending = append(failed, g.pending...)
	close(g.settled)
	g.settled = make(chan struct{})
	g.mu.Unlock()
}

// Check is quota.Admitter.CheckBudgets at the gate: whether r's budgets
// refuse anything of it now, reserving nothing.
func (g *BudgetGate) Check(ctx context.Context, r Request) error {
	bs := g.budgets.Load().of(r.Caller, r.Class)
	if len(bs) == 0 || !r.Generates {
		return nil
	}
	if r.Unmetered {
		for _, b := range bs {
			if !b.UnpricedAPIs.WorstCase() {
				return &UnmeteredAPIError{Budget: b.Name}
			}
		}
	}
	if !r.Priced {
		return Unpriced(bs, r.Model)
	}
	return g.wouldRefuse(ctx, periods(bs, g.now()), 0)
}

// wouldRefuse is the refusal of a request of cost on keys at what they
// have spent, reserving nothing: a budget spent, or one whose unspent
// part cost does not fit (a *BudgetExceededError, Cost set); or
// store.ErrStoreUnavailable when the store cannot say. What others hold
// reserved refuses nothing: a reservation waits for those.
func (g *BudgetGate) wouldRefuse(ctx context.Context, keys []budgetKey, cost price.Nanodollars) error {
	uses, err := g.store.read(ctx, keys)
	if err != nil || len(uses) != len(keys) {
		return errors.Join(store.ErrStoreUnavailable, err)
	}
	for i, k := range keys {
		if spent := uses[i].Spent; spent >= k.Limit || cost > k.Limit-spent {
			return &BudgetExceededError{Budget: k.Budget, Limit: k.Limit, Spent: spent, Cost: cost, Resets: k.Resets}
		}
	}
	return nil
}

// ChargePass is the pass of a request no gate held (quota.Admitter.Unheld) on
// the budgets of caller and class: its settle charges them the cost
// whatever they have left (charge), once; its release charges nothing.
// The zero pass when there are none.
func (g *BudgetGate) ChargePass(caller string, class classify.Class) Pass {
	bs := g.budgets.Load().of(caller, class)
	if len(bs) == 0 {
		return Pass{}
	}
	keys := periods(bs, g.now())
	id := g.nextID()
	var once sync.Once
	return Pass{OnSettle: func(cost price.Nanodollars) {
		once.Do(func() {
			if cost > 0 {
				g.charge(keys, id, cost)
			}
		})
	}}
}

// charge hands the loop the charge of cost, already spent, to keys under
// id: a reservation forced past their limits, then its settle, each
// tried again until the store takes it (a repeat of either changes
// nothing, so a charge whose answer was lost is made once). Until it is
// settled the reservation is this replica's (held): a replica that stops
// before has it charged in full, which is its cost.
func (g *BudgetGate) charge(keys []budgetKey, id string, cost price.Nanodollars) {
	g.held.Add(1)
	reserved := false // the loop's alone
	g.enqueue(budgetSettle{job: func(ctx context.Context) error {
		if !reserved {
			if err := g.store.force(ctx, keys, id, cost); err != nil {
				return err
			}
			reserved = true
		}
		if err := g.store.settle(ctx, keys, id, cost); err != nil {
			return err
		}
		g.held.Add(-1)
		return nil
	}})
}
