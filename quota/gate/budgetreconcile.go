package gate

import (
	"context"
	"maps"

	"github.com/meterproxy/meterproxy/quota/price"
)

// reconciler is a budget store that has something to hand the shared
// store once it answers again (LocalBudgets): the gate's loop calls
// reconcile every tick.
type reconciler interface {
	reconcile(ctx context.Context)
}

var _ reconciler = (*LocalBudgets)(nil)

// reconcile, once the store answers again, releases there the reserves
// whose answers were lost while it failed, and adds to it what was spent
// locally: each budget period's local spend as a reservation forced past
// its limit, then settled, each step made again until answered (a repeat
// changes nothing), so it is counted once. A replica that stops between
// the two has the reservation charged in full by the store: its amount.
// It stops at the first call that fails, to go on at the next tick.
func (s *LocalBudgets) reconcile(ctx context.Context) {
	if s.breaker.Degraded() {
		return
	}
	s.mu.Lock()
	lost := maps.Clone(s.book.lost)
	for slot, amount := range s.local.spentBy() {
		k, ok := s.book.keys[slot]
		if ok && s.book.flushing[slot] == nil {
			s.book.flushing[slot] = &budgetFlush{id: s.nextFlushID(), key: k, amount: amount}
		}
	}
	flushes := maps.Clone(s.book.flushing)
	s.mu.Unlock()
	for id, keys := range lost {
		if done, _, err := s.call(ctx, func(ctx context.Context) error { return s.primary.settle(ctx, keys, id, 0) }); !done || err != nil {
			return
		}
		s.mu.Lock()
		delete(s.book.lost, id)
		s.mu.Unlock()
	}
	for slot, f := range flushes {
		if !s.flush(ctx, f) {
			return
		}
		s.mu.Lock()
		delete(s.book.flushing, slot)
		s.local.unspend(slot, f.amount)
		seen := s.book.seen[slot]
		seen.Spent = seen.Spent.Plus(f.amount) // the store has it now, before it is read again
		s.book.seen[slot] = seen
		s.stats.reconciled[slot.budget] = s.stats.reconciled[slot.budget].Plus(f.amount)
		s.mu.Unlock()
	}
}

// flush adds f's amount to the store's spend, and reports whether it is
// there.
func (s *LocalBudgets) flush(ctx context.Context, f *budgetFlush) bool {
	keys := []budgetKey{f.key}
	if !f.forced {
		if done, _, err := s.call(ctx, func(ctx context.Context) error { return s.primary.force(ctx, keys, f.id, f.amount) }); !done || err != nil {
			return false
		}
		f.forced = true
	}
	done, _, err := s.call(ctx, func(ctx context.Context) error { return s.primary.settle(ctx, keys, f.id, f.amount) })
	return done && err == nil
}

// LocalBudgetState is one budget's local spend (budgets.on_store_error:
// local), in dollars, for the metrics.
type LocalBudgetState struct {
	Budget string
	// Spent is what this replica's requests spent on its local share
	// since it started; Reconciled what of it has been added to the
	// store.
	Spent, Reconciled float64
}

// localState returns every budget's local spend, and whether the last
// budget call was answered locally.
func (s *LocalBudgets) localState() ([]LocalBudgetState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LocalBudgetState, 0, len(s.stats.spent))
	for b, spent := range s.stats.spent {
		out = append(out, LocalBudgetState{Budget: b, Spent: spent.Dollars(), Reconciled: s.stats.reconciled[b].Dollars()})
	}
	return out, s.active.Load()
}

// unreconciled is what was spent locally and not yet added to the store,
// in all: 0 once reconciled.
func (s *LocalBudgets) unreconciled() price.Nanodollars {
	var n price.Nanodollars
	for _, v := range s.local.spentBy() {
		n = n.Plus(v)
	}
	return n
}
