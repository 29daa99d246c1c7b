package quota

import (
	"context"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// callerGate is one per-caller limit a request passes before it waits
// for its pool: its caller's cap (capGate), then its caller's and class's
// spend budgets (budgetGate) — each one more gate of this shape, keyed by caller (the model is
// grafana/dskit's gate). Implementations are safe for concurrent use.
type callerGate interface {
	// Start waits until r may go, at most until until or ctx ends, and
	// returns its pass, whose release gives the place back when the
	// request ends. A refusal is a *RefusedError with Caller set (its
	// queue is full, or until passed), or the gate's own (a
	// *BudgetExceededError, an *UnpricedModelError, an
	// *UnmeteredAPIError); it returns
	// ErrStoreUnavailable when the store fails and the gate may not go on
	// without it, ErrClosed once the gate stopped, or ctx's cause.
	Start(ctx context.Context, r gateRequest, until time.Time) (gatePass, error)
}

// gateRequest is what a caller gate knows of a request: who sends it, its
// class, and what it may cost.
type gateRequest struct {
	Caller string
	Class  classify.Class
	// Cost is the most the request may cost at the price of its model
	// (price.Price.WorstCase); Priced says a price matched it (else Cost is 0).
	Cost   price.Nanodollars
	Priced bool
	// Floor is the least a budget may cut the reservation of Cost to when
	// Cost does not fit what it has left: the worst case at the input the
	// request's body shows, for one whose input is hidden
	// (Request.HiddenInput; budgetcut.go). At or above Cost, or 0, the
	// reservation is never cut.
	Floor price.Nanodollars
	// Model is the request's model, named in a refusal for a model no
	// price matches ("" when it names none). Generates says the request
	// may cost this account money (Request.Free); one that does not (a
	// list of models, a token count, another account's key) passes
	// budgets at $0. Unmetered says its API's answers cannot be priced
	// (Request.Unmetered).
	Model                string
	Generates, Unmetered bool
}

// gatePass is a request's way through a callerGate. Its zero value is a
// pass that held nothing: release and settle are nil.
type gatePass struct {
	// release gives the place back; nil when the gate held none for it.
	// A reservation released unsettled costs nothing: the request never
	// reached the upstream.
	release func()
	// settle charges the request's real cost to what the gate reserved
	// for it (once: a release after it charges nothing more); nil when
	// the gate reserved nothing. Release still gives the place back.
	settle func(price.Nanodollars)
	// held says the request waited at the gate; heldBy names the gate
	// (HeldByCap, HeldByBudget).
	held   bool
	heldBy string
}

// Release gives p's place back; it does nothing for a pass that held
// none.
func (p gatePass) Release() {
	if p.release != nil {
		p.release()
	}
}

// Settle charges cost to p's reservations, once; it does nothing for a
// pass that reserved nothing. Release still gives p's place back.
func (p gatePass) Settle(cost price.Nanodollars) {
	if p.settle != nil {
		p.settle(cost)
	}
}

var _ callerGate = gateChain(nil)

// gateChain is a request's caller gates, passed in order: the caller's
// cap, then the spend budgets (Admitter.gates). Its pass releases every
// gate's.
type gateChain []callerGate

// Start implements callerGate: each gate in turn, within the one until;
// a refusal gives back what the gates before it granted.
func (ch gateChain) Start(ctx context.Context, r gateRequest, until time.Time) (gatePass, error) {
	if len(ch) == 1 {
		return ch[0].Start(ctx, r, until)
	}
	var passes []gatePass
	held, heldBy := false, ""
	for _, g := range ch {
		p, err := g.Start(ctx, r, until)
		if err != nil {
			for _, q := range passes {
				q.Release()
			}
			return gatePass{}, err
		}
		held = held || p.held
		if heldBy == "" && p.held {
			heldBy = p.heldBy
		}
		if p.release != nil || p.settle != nil {
			passes = append(passes, p)
		}
	}
	if len(passes) == 0 {
		return gatePass{held: held, heldBy: heldBy}, nil
	}
	return gatePass{held: held, heldBy: heldBy, release: func() {
		for _, p := range passes {
			p.Release()
		}
	}, settle: func(cost price.Nanodollars) {
		for _, p := range passes {
			p.Settle(cost)
		}
	}}, nil
}
