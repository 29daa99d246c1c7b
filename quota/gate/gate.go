package gate

import (
	"context"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// Gate is one per-caller limit a request passes before it waits
// for its pool: its caller's cap (CapGate), then its caller's and class's
// spend budgets (BudgetGate) — each one more gate of this shape, keyed by caller (the model is
// grafana/dskit's gate). Implementations are safe for concurrent use.
type Gate interface {
	// Start waits until r may go, at most until until or ctx ends, and
	// returns its pass, whose release gives the place back when the
	// request ends. A refusal is a *RefusedError with Caller set (its
	// queue is full, or until passed), or the gate's own (a
	// *BudgetExceededError, an *UnpricedModelError, an
	// *UnmeteredAPIError); it returns
	// store.ErrStoreUnavailable when the store fails and the gate may not go on
	// without it, ErrClosed once the gate stopped, or ctx's cause.
	Start(ctx context.Context, r Request, until time.Time) (Pass, error)
}

// Classes is what the caller gates read of the classes'
// configuration, by class: max_queue, the most of its requests that may
// wait at a gate on this replica, and classes.<class>.budget.
type Classes struct {
	MaxQueue [classify.NumClasses]int
	Budget   [classify.NumClasses]classify.Budget
}

// Request is what a caller gate knows of a request: who sends it, its
// class, and what it may cost.
type Request struct {
	Caller string
	Class  classify.Class
	// Cost is the most the request may cost at the price of its model
	// (price.Price.WorstCase); Priced says a price matched it (else Cost is 0).
	Cost   price.Nanodollars
	Priced bool
	// Floor is the least a budget may cut the reservation of Cost to when
	// Cost does not fit what it has left: the worst case at the input the
	// request's body shows, for one whose input is hidden
	// (quota.Request.HiddenInput; budgetcut.go). At or above Cost, or 0, the
	// reservation is never cut.
	Floor price.Nanodollars
	// Model is the request's model, named in a refusal for a model no
	// price matches ("" when it names none). Generates says the request
	// may cost this account money (quota.Request.Free); one that does not (a
	// list of models, a token count, another account's key) passes
	// budgets at $0. Unmetered says its API's answers cannot be priced
	// (quota.Request.Unmetered).
	Model                string
	Generates, Unmetered bool
	// Simulated says the request is a shadow decision's, beside one
	// forwarded at once (mode: shadow): a budget asks whether it would
	// refuse it at what it has spent, and reserves nothing (the request
	// forwarded is charged what it spent: quota.Admitter.Charge).
	Simulated bool
}

// Pass is a request's way through a Gate. Its zero value is a
// pass that held nothing: release and settle are nil.
type Pass struct {
	// release gives the place back; nil when the gate held none for it.
	// A reservation released unsettled costs nothing: the request never
	// reached the upstream.
	OnRelease func()
	// settle charges the request's real cost to what the gate reserved
	// for it (once: a release after it charges nothing more); nil when
	// the gate reserved nothing. Release still gives the place back.
	OnSettle func(price.Nanodollars)
	// held says the request waited at the gate; heldBy names the gate
	// (HeldByCap, HeldByBudget).
	Held   bool
	HeldBy string
}

// Release gives p's place back; it does nothing for a pass that held
// none.
func (p Pass) Release() {
	if p.OnRelease != nil {
		p.OnRelease()
	}
}

// Settle charges cost to p's reservations, once; it does nothing for a
// pass that reserved nothing. Release still gives p's place back.
func (p Pass) Settle(cost price.Nanodollars) {
	if p.OnSettle != nil {
		p.OnSettle(cost)
	}
}

var _ Gate = Chain(nil)

// Chain is a request's caller gates, passed in order: the caller's
// cap, then the spend budgets (quota.Admitter.gates). Its pass releases every
// gate's.
type Chain []Gate

// Start implements Gate: each gate in turn, within the one until;
// a refusal gives back what the gates before it granted.
func (ch Chain) Start(ctx context.Context, r Request, until time.Time) (Pass, error) {
	if len(ch) == 1 {
		return ch[0].Start(ctx, r, until)
	}
	var passes []Pass
	held, heldBy := false, ""
	for _, g := range ch {
		p, err := g.Start(ctx, r, until)
		if err != nil {
			for _, q := range passes {
				q.Release()
			}
			return Pass{}, err
		}
		held = held || p.Held
		if heldBy == "" && p.Held {
			heldBy = p.HeldBy
		}
		if p.OnRelease != nil || p.OnSettle != nil {
			passes = append(passes, p)
		}
	}
	if len(passes) == 0 {
		return Pass{Held: held, HeldBy: heldBy}, nil
	}
	return Pass{Held: held, HeldBy: heldBy, OnRelease: func() {
		for _, p := range passes {
			p.Release()
		}
	}, OnSettle: func(cost price.Nanodollars) {
		for _, p := range passes {
			p.Settle(cost)
		}
	}}, nil
}
