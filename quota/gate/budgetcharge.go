package gate

import (
	"context"
	"errors"
	"sync"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Check is CheckBudgets at the gate.
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
	keys := periods(bs, g.now())
	uses, err := g.store.read(ctx, keys)
	if err != nil || len(uses) != len(keys) {
		return errors.Join(store.ErrStoreUnavailable, err)
	}
	for i, k := range keys {
		if uses[i].Spent >= k.Limit {
			return &BudgetExceededError{Budget: k.Budget, Limit: k.Limit, Spent: uses[i].Spent, Resets: k.Resets}
		}
	}
	return nil
}

// ChargePass is the pass of a request no gate held (Admitter.Unheld) on
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
