package quota

import (
	"context"

	"github.com/meterproxy/meterproxy/quota/store"
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
