package gate

import (
	"context"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
)

// budgetKey is one budget's current period, as the store keys its spend.
type budgetKey struct {
	// Budget names the budget: "caller:<name>" or "class:<class>".
	Budget string `json:"budget"`
	// Period is the period's name (classify.BudgetPeriod.Window).
	Period string `json:"period"`
	// Limit is the budget: the most its period may spend.
	Limit price.Nanodollars `json:"limit"`
	// Resets is when the period ends: the store keeps its spend a while
	// after.
	Resets time.Time `json:"-"`
}

// budgetOutcome is what a reservation got.
type budgetOutcome int

// The outcomes of BudgetStore.reserve.
const (
	// budgetReserved: the cost fits every budget; it is reserved on each.
	budgetReserved budgetOutcome = iota
	// budgetWait: the cost fits what one budget has not spent, but not
	// beside what other requests hold reserved there; it may fit once
	// they settle (to their real cost, below their worst case).
	budgetWait
	// budgetExceeded: the cost does not fit what one budget has left
	// unspent, whatever the reservations settle to.
	budgetExceeded
)

// budgetUse is a budget period's spend: settled, and held by reservations
// not settled yet.
type budgetUse struct {
	Spent    price.Nanodollars `json:"spent"`
	Reserved price.Nanodollars `json:"reserved"`
}

// budgetAnswer is the answer to a reservation: its outcome, which budget
// (an index of the keys) refused it, and every budget's use after it.
type budgetAnswer struct {
	Outcome budgetOutcome
	Refused int
	Use     []budgetUse
}

// BudgetStore keeps budgets' spend, for one replica or a fleet. A
// reservation holds a request's worst-case cost on each of its budgets at
// once, so that concurrent requests can never spend together more than a
// budget allows; settling it replaces the worst case by the real cost.
// Every call may be made again after an error (its answer lost, it may
// have been made all the same): a repeated reserve or settle of an id
// changes nothing. Implementations are safe for concurrent use.
type BudgetStore interface {
	// reserve reserves cost on every key under the reservation id (unique
	// to the request), if it fits each (see budgetOutcome); nothing is
	// reserved unless the outcome is budgetReserved. A reservation id
	// already holds answers budgetReserved and changes nothing.
	reserve(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error)
	// force reserves cost on every key under id whatever the keys have
	// left, past their limits if need be: the reservation of a cost
	// already spent, which no budget may refuse (BudgetGate.charge). A
	// reservation id already holds changes nothing.
	force(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error
	// settle ends reservation id and adds cost to each key's spend; a
	// cost of 0 releases it. A reservation the store does not hold
	// (settled already, or never made) changes nothing.
	settle(ctx context.Context, keys []budgetKey, id string, cost price.Nanodollars) error
	// read returns each key's use.
	read(ctx context.Context, keys []budgetKey) ([]budgetUse, error)
}

// fits says what a reservation of cost may get from a budget whose period
// stands at u: the judgement both stores make, memory here and Redis in
// budget.lua.
func (u budgetUse) fits(cost, limit price.Nanodollars) budgetOutcome {
	switch {
	case u.Spent.Plus(cost) > limit:
		return budgetExceeded
	case u.Spent.Plus(u.Reserved).Plus(cost) > limit:
		return budgetWait
	}
	return budgetReserved
}

// judge is the outcome of a reservation of cost over keys at uses: the
// worst of the keys' (exceeded before wait), and the first key that gave
// it.
func judge(keys []budgetKey, uses []budgetUse, cost price.Nanodollars) (budgetOutcome, int) {
	out, refused := budgetReserved, 0
	for i, k := range keys {
		if o := uses[i].fits(cost, k.Limit); o > out {
			out, refused = o, i
		}
	}
	return out, refused
}

// budgetSlot names a budget's period in MemoryBudgets.
type budgetSlot struct{ budget, period string }

// memBudget is one budget period in MemoryBudgets: its use and its
// reservations by id.
type memBudget struct {
	use budgetUse
	res map[string]price.Nanodollars
}

var _ BudgetStore = (*MemoryBudgets)(nil)

// MemoryBudgets is the BudgetStore of one replica, in process. Its spend can
// outlive the process in a file (budgetFile).
type MemoryBudgets struct {
	mu     sync.Mutex
	slots  map[budgetSlot]*memBudget
	dirty  bool // changed since the last snapshot
	saveMu sync.Mutex
}

// NewMemoryBudgets returns an empty in-process budget store.
func NewMemoryBudgets() *MemoryBudgets { return &MemoryBudgets{slots: map[budgetSlot]*memBudget{}} }

// slot returns k's period, created empty. Called with mu held.
func (m *MemoryBudgets) slot(k budgetKey) *memBudget {
	s := budgetSlot{k.Budget, k.Period}
	b := m.slots[s]
	if b == nil {
		b = &memBudget{res: map[string]price.Nanodollars{}}
		m.slots[s] = b
	}
	return b
}

// reserve implements BudgetStore.
func (m *MemoryBudgets) reserve(_ context.Context, keys []budgetKey, id string, cost price.Nanodollars) (budgetAnswer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uses := make([]budgetUse, len(keys))
	held := false
	for i, k := range keys {
		b := m.slot(k)
		uses[i] = b.use
		_, ok := b.res[id]
		held = held || ok
	}
	if held {
		return budgetAnswer{Outcome: budgetReserved, Use: uses}, nil
	}
	out, refused := judge(keys, uses, cost)
	if out == budgetReserved {
		for i, k := range keys {
			b := m.slot(k)
			b.res[id] = cost
			b.use.Reserved = b.use.Reserved.Plus(cost)
			uses[i] = b.use
		}
		m.dirty = true
	}
	return budgetAnswer{Outcome: out, Refused: refused, Use: uses}, nil
}

// force implements BudgetStore.
func (m *MemoryBudgets) force(_ context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if _, ok := m.slot(k).res[id]; ok {
			return nil
		}
	}
	for _, k := range keys {
		b := m.slot(k)
		b.res[id] = cost
		b.use.Reserved = b.use.Reserved.Plus(cost)
	}
	m.dirty = true
	return nil
}

// settle implements BudgetStore. A reservation it does not hold (settled
// already) changes nothing.
func (m *MemoryBudgets) settle(_ context.Context, keys []budgetKey, id string, cost price.Nanodollars) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		b := m.slots[budgetSlot{k.Budget, k.Period}]
		if b == nil {
			continue
		}
		if r, ok := b.res[id]; ok {
			delete(b.res, id)
			b.use.Reserved = max(b.use.Reserved-r, 0)
			b.use.Spent = b.use.Spent.Plus(cost)
			m.dirty = true
		}
	}
	return nil
}

// read implements BudgetStore.
func (m *MemoryBudgets) read(_ context.Context, keys []budgetKey) ([]budgetUse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uses := make([]budgetUse, len(keys))
	for i, k := range keys {
		if b := m.slots[budgetSlot{k.Budget, k.Period}]; b != nil {
			uses[i] = b.use
		}
	}
	return uses, nil
}

// move renames reservation from as to on each of keys, where it is held;
// where it is not (it was reaped, or settled), nothing moves.
func (m *MemoryBudgets) move(keys []budgetKey, from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		b := m.slot(k)
		if r, ok := b.res[from]; ok {
			delete(b.res, from)
			b.res[to] = r
		}
	}
	m.dirty = true
}

// settleHeld replaces reservation id by cost on each of keys where it is
// held, and does nothing where it is not: settling twice charges once.
func (m *MemoryBudgets) settleHeld(keys []budgetKey, id string, cost price.Nanodollars) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		b := m.slot(k)
		if r, ok := b.res[id]; ok {
			delete(b.res, id)
			b.use.Reserved = max(b.use.Reserved-r, 0)
			b.use.Spent = b.use.Spent.Plus(cost)
		}
	}
	m.dirty = true
}

// spentBy returns every budget period's settled spend that is above 0,
// by slot: what LocalBudgets has yet to add to the shared store.
func (m *MemoryBudgets) spentBy() map[budgetSlot]price.Nanodollars {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[budgetSlot]price.Nanodollars{}
	for s, b := range m.slots {
		if b.use.Spent > 0 {
			out[s] = b.use.Spent
		}
	}
	return out
}

// unspend takes amount off slot s's settled spend: spend LocalBudgets
// added to the shared store, no longer this store's to count.
func (m *MemoryBudgets) unspend(s budgetSlot, amount price.Nanodollars) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.slots[s]; b != nil {
		b.use.Spent = max(b.use.Spent-amount, 0)
		m.dirty = true
	}
}
