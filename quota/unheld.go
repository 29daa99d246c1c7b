package quota

import (
	"context"
	"errors"
	"sync"

	"github.com/meterproxy/meterproxy/quota/store"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// Requests nobody can hold: a Realtime response the provider's voice
// detection created on its own, with no request the proxy could hold
// before it (Unheld). Its slot, its tokens and its cost are counted all
// the same, after the fact; and a session's opening asks its budgets
// whether anything is left before any of its requests (CheckBudgets).

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
		s.gate = a.budgets.chargePass(req.Caller, req.Class)
	}
	l.leases.admit(req.Class)
	return l.grant(s)
}

// CheckBudgets reports whether req's caller's and class's budgets refuse
// anything of it now, whatever it costs: a budget spent this period (a
// *BudgetExceededError whose Cost is 0), its model unpriced under a
// budget that refuses unpriced models (*UnpricedModelError), its API
// unmetered under one that refuses those (*UnmeteredAPIError); or
// ErrStoreUnavailable when the store cannot say. It reserves nothing: a
// Realtime session's opening asks it, before any of its requests, which
// are admitted each as any other.
func (a *Admitter) CheckBudgets(ctx context.Context, req Request) error {
	r := req.gate()
	r.Priced = req.Model.priceIn(a.cfg.Load().Prices) != nil
	return a.budgets.check(ctx, r)
}

// check is CheckBudgets at the gate.
func (g *budgetGate) check(ctx context.Context, r gateRequest) error {
	bs := g.budgets.Load().of(r.Caller, r.Class)
	if len(bs) == 0 || !r.Generates {
		return nil
	}
	if r.Unmetered {
		for _, b := range bs {
			if !b.UnpricedAPIs.WorstCase() {
				return &UnmeteredAPIError{Budget: b.name}
			}
		}
	}
	if !r.Priced {
		return unpriced(bs, r.Model)
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

// chargePass is the pass of a request no gate held (Admitter.Unheld) on
// the budgets of caller and class: its settle charges them the cost
// whatever they have left (charge), once; its release charges nothing.
// The zero pass when there are none.
func (g *budgetGate) chargePass(caller string, class classify.Class) gatePass {
	bs := g.budgets.Load().of(caller, class)
	if len(bs) == 0 {
		return gatePass{}
	}
	keys := periods(bs, g.now())
	id := g.nextID()
	var once sync.Once
	return gatePass{settle: func(cost price.Nanodollars) {
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
func (g *budgetGate) charge(keys []budgetKey, id string, cost price.Nanodollars) {
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
