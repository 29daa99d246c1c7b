package gate

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Breaker is the windows store's breaker as LocalBudgets uses it
// (*store.Failover).
type Breaker interface {
	// Call makes call on the shared store unless the breaker is open,
	// and reports whether its answer stands; a failure opens it.
	Call(ctx context.Context, call func(context.Context) error) (done bool, err error)
	// Degraded reports whether the breaker is open.
	Degraded() bool
}

// errBudgetBypassed is the error of a budget call LocalBudgets could not
// make on the shared store, which fails: the gate's loop tries it again
// later, and goes on with the others meanwhile (they cost no timeout).
var errBudgetBypassed = fmt.Errorf("%w: the budget call waits for the store to answer again", store.ErrStoreUnavailable)

var _ BudgetStore = (*LocalBudgets)(nil)

// LocalBudgets is budgets.on_store_error: local, the shared budget store
// (RedisBudgets) behind the windows store's breaker with a bounded
// fallback: while the store fails, each replica may spend at most its
// share of what each budget had left when this replica last read it —
// (limit − spent − reserved) ÷ expected replicas — kept in a
// MemoryBudgets, and refuses beyond it as the store would
// (budget_exceeded). The reservations held in the store when it failed
// settle there when it returns; those made locally settle locally. When
// the store answers again, reconcile adds what was spent locally to the
// store's spend — once, whatever answers are lost — and releases there
// the reserves whose answers were lost. So the fleet together spends at
// most what was left: the other replicas' reservations settle at most
// at what they hold, and each replica's share is its own. A budget this
// replica never read (its first period, a start during the outage) has
// no share: its requests are refused, 503 store_unavailable, as under
// closed. Safe for concurrent use; reconcile is the gate loop's alone.
type LocalBudgets struct {
	primary  BudgetStore
	breaker  Breaker
	replicas int64
	local    *MemoryBudgets
	seq      atomic.Uint64
	// active says the last budget call was answered locally.
	active atomic.Bool

	mu    sync.Mutex // guards book and stats
	book  localBook
	stats localStats
}

// localBook is what LocalBudgets keeps of the store and of its own
// reservations.
type localBook struct {
	// seen is each budget period's use as the store last answered it.
	seen map[budgetSlot]budgetUse
	// keys is each budget period's key as the gate last asked for it,
	// for the reconciliation that adds its local spend to the store.
	keys map[budgetSlot]budgetKey
	// ids are the reservations held locally.
	ids map[string]bool
	// lost are the reserves the store was asked for and failed, answered
	// locally: they may have been made all the same, and are released
	// there when it returns.
	lost map[string][]budgetKey
	// flushing is each budget period's local spend being added to the
	// store (reconcile).
	flushing map[budgetSlot]*budgetFlush
}

// localStats counts, by budget, what was spent locally and what of it
// reached the store, in nanodollars (metrics).
type localStats struct {
	spent, reconciled map[string]price.Nanodollars
}

// budgetFlush is the addition of a budget period's local spend to the
// store: a reservation forced past its limit (id), then its settle, each
// made again until it is answered (a repeat changes nothing).
type budgetFlush struct {
	id     string
	key    budgetKey
	amount price.Nanodollars
	forced bool
}

// NewLocalBudgets returns primary behind breaker, with the local fallback
// of budgets.on_store_error: local for a fleet of replicas (expected
// replicas, at least 1).
func NewLocalBudgets(primary BudgetStore, breaker Breaker, replicas int64) *LocalBudgets {
	return &LocalBudgets{primary: primary, breaker: breaker, replicas: max(replicas, 1), local: NewMemoryBudgets(),
		book: localBook{seen: map[budgetSlot]budgetUse{}, keys: map[budgetSlot]budgetKey{}, ids: map[string]bool{},
			lost: map[string][]budgetKey{}, flushing: map[budgetSlot]*budgetFlush{}},
		stats: localStats{spent: map[string]price.Nanodollars{}, reconciled: map[string]price.Nanodollars{}}}
}

// slotOf is k's budget period.
func slotOf(k budgetKey) budgetSlot { return budgetSlot{k.Budget, k.Period} }

// call makes f on the store behind the breaker; called says whether it
// was made (it may have been, and failed).
func (s *LocalBudgets) call(ctx context.Context, f func(context.Context) error) (done, called bool, err error) {
	done, err = s.breaker.Call(ctx, func(ctx context.Context) error {
		called = true
		return f(ctx)
	})
	return done, called, err
}

// saw records the store's answer uses for keys.
func (s *LocalBudgets) saw(keys []budgetKey, uses []budgetUse) {
	if len(uses) != len(keys) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		s.book.seen[slotOf(k)] = uses[i]
	}
	s.active.Store(false)
}

// share is this replica's part of what a budget of limit had left at
// seen: (limit − spent − reserved) ÷ replicas, 0 when nothing was left.
func (s *LocalBudgets) share(limit price.Nanodollars, seen budgetUse) price.Nanodollars {
	left := limit - seen.Spent - seen.Reserved
	if left <= 0 {
		return 0
	}
	return left / price.Nanodollars(s.replicas)
}

// reserve implements BudgetStore: the store's answer while it answers,
// else this replica's share's.
func (s *LocalBudgets) reserve(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error) {
	var ans budgetAnswer
	done, called, err := s.call(ctx, func(ctx context.Context) (err error) {
		ans, err = s.primary.reserve(ctx, keys, id, cost)
		return err
	})
	if done {
		if err == nil {
			s.saw(keys, ans.Use)
		}
		return ans, err
	}
	return s.reserveLocal(ctx, keys, id, cost, called)
}

// reserveLocal reserves cost on keys under id within this replica's
// shares; called says the store was asked first (and failed). Its answer
// is the gate's to judge as the store's: each budget's use counts what
// this replica may not spend (limit − share) as spent.
func (s *LocalBudgets) reserveLocal(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars, called bool) (budgetAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shares := make([]budgetKey, len(keys))
	for i, k := range keys {
		seen, ok := s.book.seen[slotOf(k)]
		if !ok {
			return budgetAnswer{}, fmt.Errorf("%w: budget %s (%s) was never read from the store, so this replica has no share of it",
				store.ErrStoreUnavailable, k.Budget, k.Period)
		}
		shares[i] = k
		shares[i].Limit = s.share(k.Limit, seen)
	}
	if called {
		s.book.lost[id] = keys
	}
	ans, err := s.local.reserve(ctx, shares, id, cost)
	if err != nil {
		return ans, err
	}
	for i, k := range keys {
		s.book.keys[slotOf(k)] = k
		ans.Use[i].Spent = (k.Limit - shares[i].Limit).Plus(ans.Use[i].Spent)
	}
	if ans.Outcome == budgetReserved {
		s.book.ids[id] = true
	}
	s.active.Store(true)
	return ans, nil
}

// force implements BudgetStore: a cost already spent is recorded in the
// store while it answers, else locally (and reconciled).
func (s *LocalBudgets) force(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	done, called, err := s.call(ctx, func(ctx context.Context) error { return s.primary.force(ctx, keys, id, cost) })
	if done {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if called {
		s.book.lost[id] = keys
	}
	for _, k := range keys {
		s.book.keys[slotOf(k)] = k
	}
	s.book.ids[id] = true
	s.active.Store(true)
	return s.local.force(ctx, keys, id, cost)
}

// settle implements BudgetStore: a reservation made locally settles
// locally; one made in the store waits for it (errBudgetBypassed).
func (s *LocalBudgets) settle(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	s.mu.Lock()
	if s.book.ids[id] {
		delete(s.book.ids, id)
		for _, k := range keys {
			s.stats.spent[k.Budget] = s.stats.spent[k.Budget].Plus(cost)
		}
		s.mu.Unlock()
		return s.local.settle(ctx, keys, id, cost)
	}
	s.mu.Unlock()
	done, _, err := s.call(ctx, func(ctx context.Context) error { return s.primary.settle(ctx, keys, id, cost) })
	if !done {
		return errBudgetBypassed
	}
	return err
}

// read implements BudgetStore: the store's use and what this replica
// holds locally besides, or, while the store fails, what it last read
// of it and what it holds locally.
func (s *LocalBudgets) read(ctx context.Context, keys []budgetKey) ([]budgetUse, error) {
	var uses []budgetUse
	done, _, err := s.call(ctx, func(ctx context.Context) (err error) {
		uses, err = s.primary.read(ctx, keys)
		return err
	})
	if done && err != nil {
		return nil, err
	}
	if done && len(uses) != len(keys) {
		return uses, nil
	}
	if done {
		s.saw(keys, uses)
	}
	local, _ := s.local.read(ctx, keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]budgetUse, len(keys))
	for i, k := range keys {
		base, ok := s.book.seen[slotOf(k)]
		if done {
			base, ok = uses[i], true
		}
		if !ok {
			return nil, errBudgetBypassed
		}
		out[i] = budgetUse{Spent: base.Spent.Plus(local[i].Spent), Reserved: base.Reserved.Plus(local[i].Reserved)}
	}
	return out, nil
}

// heldLocally reports whether reservation id is held locally: made on
// this replica's share while the store failed.
func (s *LocalBudgets) heldLocally(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.ids[id]
}

// nextFlushID is a flush's reservation id: "local-" and a sequence
// number, never one of the gate's (base-36 digits alone).
func (s *LocalBudgets) nextFlushID() string { return "local-" + strconv.FormatUint(s.seq.Add(1), 36) }
