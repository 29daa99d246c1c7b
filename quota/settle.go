package quota

import "github.com/meterproxy/meterproxy/quota/price"

// Settlement: how a lease's request ended, as the proxy read it off the
// wire (Outcome), and what that means for the pool's windows and
// in-flight bound, the caller's budgets and the adaptive bound's
// measurement — decided here alone (Lease.Settle).

// Outcome is how a lease's upstream exchange ended, as the proxy saw it:
// what Lease.Settle settles the lease by.
type Outcome struct {
	// Status is the HTTP status of the upstream's answer (a socket
	// turn's answer that began counts as 200); 0 when no answer came (a
	// timeout, a connection that failed or broke).
	Status int
	// Unsent says the request never left — no connection to the upstream
	// could be made — so the provider never saw it.
	Unsent bool
	// Measured says the answer speaks for the lease's account, so that
	// the adaptive bound counts it: it spent this account (not a caller's
	// own key's), and it is no flex lack of capacity.
	Measured bool
	// Usage is what the answer reported, or what the proxy estimated of
	// it; nil when there was none to read (a refusal, an answer the proxy
	// does not meter).
	Usage *Usage
}

// Usage is an answer's usage as a lease is settled to it.
type Usage struct {
	// Priced is the usage as prices count it (its Output counts for
	// account.output_tokens_per_minute and as the adaptive bound's work).
	Priced price.Usage
	// Tokens is what the answer cost in tokens as its provider charges
	// them, and Settles whether the provider gives back what the
	// admission charge overestimated at all (OpenAI does not: max_tokens
	// is charged whatever the answer).
	Tokens  int64
	Settles bool
	// Estimated says the answer reported no usage: the proxy estimated it
	// from the text it saw (or a stream was cut before its usage came).
	Estimated bool
	// Worst says the usage cannot bound what the answer cost (a background
	// answer, a stream cut short, an API whose answers report no usage):
	// its budgets are charged its worst case (spendWorst).
	Worst bool
	// Charged says its cost is charged to the lease's budgets: it spent
	// this account, not a caller's own key's.
	Charged bool
}

// Settled is what settling a lease charged its budgets: Cost, priced at
// its model's price when Priced (else 0); Charged says this settlement
// charged them (its outcome's usage was Charged, and it was the lease's
// first), so that what the proxy counts of spend is what was charged.
type Settled struct {
	Cost    price.Nanodollars
	Priced  bool
	Charged bool
}

// Settle ends the lease's upstream exchange with its outcome o, once (a
// later call does nothing and returns nothing): the proxy's one call, the
// policy here alone. Release still frees its slot.
//
//   - The adaptive bound counts the answer when o is Measured (its status
//     at release: 2xx a completion, 429 a throttle, 5xx and no answer a
//     failure).
//   - The token charge is given back whole when the request never left
//     (Unsent) or the provider answered it with anything but a success:
//     it generated nothing, and a refusal's charge (max_tokens as sent,
//     for one) kept would freeze the pool's tokens. A request that may
//     have reached the provider without an answer keeps its charge.
//   - Otherwise its usage, if any, settles the charge as its provider
//     does (Usage.Settles): to what it reported, up or down; an estimate
//     never below the charge taken at admission — the estimate counts
//     the text the proxy saw, and the provider may have spent more
//     (hidden reasoning, a stream cut on the way), so a background
//     Responses answer keeps its admission charge. Its output counts for
//     account.output_tokens_per_minute and, after a 2xx, as work.
//   - Its budgets are charged its priced usage when Charged — at its
//     worst case when its usage is Worst — in place of what they held
//     reserved; a lease settled without usage charges them nothing.
func (s *Lease) Settle(o Outcome) Settled {
	if !s.ended.CompareAndSwap(false, true) {
		return Settled{}
	}
	u := o.Usage
	if o.Measured {
		s.answered(o.Status)
	}
	if o.Unsent || o.Status != 0 && (o.Status < 200 || o.Status >= 300) {
		s.correct(0)
		return Settled{}
	}
	if u == nil {
		return Settled{}
	}
	if tokens, ok := s.settleTo(*u); ok {
		s.correct(tokens)
	}
	s.spent(u.Priced.Output)
	return s.charge(u)
}

// settleTo is the tokens the lease's charge settles to for u, and
// whether it settles at all (Settle's rule: an estimate never below the
// charge).
func (s *Lease) settleTo(u Usage) (int64, bool) {
	if !u.Settles {
		return 0, false
	}
	if u.Estimated {
		return max(u.Tokens, s.cost), true
	}
	return u.Tokens, true
}

// charge charges u's cost to the lease's budgets when it is Charged.
func (s *Lease) charge(u *Usage) Settled {
	if u == nil || !u.Charged {
		return Settled{}
	}
	var cost price.Nanodollars
	var priced bool
	if u.Worst {
		cost, priced = s.spendWorst(u.Priced)
	} else {
		cost, priced = s.spend(u.Priced)
	}
	return Settled{Cost: cost, Priced: priced, Charged: true}
}

// cancel ends a lease whose request never went — granted after it gave
// up, or moved to another account — its charge given back (unless a
// settlement came first: a refusal that moved it gave it back already)
// and its slot freed.
func (s *Lease) cancel() {
	s.Settle(Outcome{Unsent: true})
	s.Release()
}
