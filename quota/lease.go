package quota

import (
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// signals are how the rest of a limiter tells its admission loop that
// something changed since it last looked; the loop alone receives and
// clears them. Each channel has room for one wake-up (see notify).
type signals struct {
	arrive chan struct{} // a waiter joined a queue, or credits ran low
	freed  chan struct{} // a lease was released, the upstream reported, …
	// tokensFreed says a correction gave tokens back.
	tokensFreed atomic.Bool
	// reconfigured says the limits changed: whatever blocked a class may
	// not any more.
	reconfigured atomic.Bool
}

// ledger is what a limiter's leases change: this replica's count in
// flight and what their settlement owes the store. It is all a Lease
// reaches of its limiter. Safe for concurrent use (atomics only).
type ledger struct {
	// limits are the limiter's, read for the budgets a settlement is
	// bounded by.
	limits *atomic.Pointer[limitSet]
	sig    *signals
	// inFlight counts this replica's leases not yet released, by class.
	inFlight [classify.NumClasses]atomic.Int64
	// corrections are token corrections not yet sent to the store.
	corrections [classify.NumClasses]atomic.Int64
	// output is output tokens reported and not yet sent to the store.
	output atomic.Int64
	// settleFlow moves a fair-queuing flow's service by delta, under the
	// wait queue's lock (waitQueue.correctFlow).
	settleFlow func(c classify.Class, flow flowKey, delta float64)
	// adapt is what the leases saw of the upstream, for the adaptive
	// bound.
	adapt adaptLedger
	// now reads the clock for the leases' grant and release times;
	// time.Now unless a test sets it.
	now func() time.Time
}

// admit counts a lease of class c in flight; called before its request
// may run, so its Release never finds the count without it.
func (g *ledger) admit(c classify.Class) { g.inFlight[c].Add(1) }

// giveBack returns cost tokens charged for a waiter of class c that was
// never admitted.
func (g *ledger) giveBack(c classify.Class, cost int64) {
	g.corrections[c].Add(-cost)
	g.sig.tokensFreed.Store(true)
}

// owed takes the corrections and output tokens the store has not heard
// of, for a store call; restore puts them back if it failed.
func (g *ledger) owed() (corrections store.PerClass, output int64) {
	for c := range corrections {
		corrections[c] = g.corrections[c].Swap(0)
	}
	return corrections, g.output.Swap(0)
}

// restore puts back what owed took for a store call that failed.
func (g *ledger) restore(corrections store.PerClass, output int64) {
	for c, n := range corrections {
		g.corrections[c].Add(n)
	}
	g.output.Add(output)
}

// Lease is one admitted request's claim on an in-flight slot.
type Lease struct {
	leases *ledger
	class  classify.Class
	cost   int64
	// leaseWait is what it waited for; leaseEnd what became of it.
	leaseWait
	leaseEnd
	// gate is its pass through its caller's gates (admitThrough),
	// released with it.
	gate gate.Pass
	// leaseFlow is its fair-queuing flow.
	leaseFlow
	// granted is when it was admitted.
	granted time.Time
	// leasePrice is its price and worst case.
	leasePrice
	// until is when its class's max_wait, counted from when it asked for
	// admission, ends (Until).
	until time.Time
	// account and pool are where it was admitted (Account, Pool).
	account, pool string
}

// leaseWait is what a Lease's request waited for: held says it waited
// at its pool; wait is what held it there (Wait).
type leaseWait struct {
	held bool
	wait gate.Wait
}

// leaseEnd is what became of a Lease: released; ended, settled (Settle);
// answer, 1 + the status Settle recorded (0: none).
type leaseEnd struct {
	released atomic.Bool
	ended    atomic.Bool
	answer   atomic.Int32
}

// leaseFlow is a Lease's fair-queuing flow and its caller's weight when
// its service was counted in tokens (weight 0 otherwise), so correct can
// settle the flow's service too.
type leaseFlow struct {
	flow   flowKey
	weight float64
}

// leasePrice is a Lease's model's price at admission (nil when none
// matched) and worst, its worst case at that price: what its budgets
// reserved unless they cut it (package quota/gate's budgetcut.go).
type leasePrice struct {
	price *price.Price
	worst price.Nanodollars
}

// Account is the account the lease was admitted at, as upstream.accounts
// names it; "" for the one account of a configuration without them.
func (s *Lease) Account() string { return s.account }

// Pool is the pool the lease draws on at its account, as PoolAt
// names it ("" for the account's own).
func (s *Lease) Pool() string { return s.pool }

// Until is when the max_wait of the lease's class, counted from when its
// request asked for admission, ends: what is left of it after admission
// is how long the request may still be held, as a flex request retried
// for capacity is. The zero time for a lease not admitted by Admit.
func (s *Lease) Until() time.Time { return s.until }

// spend prices the usage u its response reported at its model's price as
// of its admission, charges that to its budgets in place of what they
// held reserved for it, and returns the cost, and whether a price matched
// its model (else the cost is 0). A request released without it charges
// its budgets nothing (it never reached the upstream, or the upstream
// refused it). Settle calls it.
func (s *Lease) spend(u price.Usage) (price.Nanodollars, bool) {
	if s.price == nil {
		s.gate.Settle(0)
		return 0, false
	}
	cost := s.price.Cost(u)
	s.gate.Settle(cost)
	return cost, true
}

// spendWorst charges its budgets, for a response that cannot say what it
// cost, the larger of its worst case — the whole of it, at max_input for
// a request whose input is hidden, even where its budgets cut the
// reservation to what they had left — and u, the usage it reported or
// was estimated at, priced; and returns that. It is for a background
// Responses answer, which comes before its generation, and a response
// cut before its usage came (Usage.Worst). Without a price it is spend
// of nothing.
func (s *Lease) spendWorst(u price.Usage) (price.Nanodollars, bool) {
	if s.price == nil {
		return s.spend(price.Usage{})
	}
	cost := max(s.worst, s.price.Cost(u))
	s.gate.Settle(cost)
	return cost, true
}

// answered records how the upstream exchange ended: its HTTP status, or 0
// when there was no answer (a timeout, a connection that failed). It
// makes the lease count in its pool's measurement when released
// (adaptLedger.answered), with its latency from admission to release; a
// lease never answered (refused before the upstream, a client that left)
// counts nothing.
func (s *Lease) answered(status int) {
	s.answer.Store(int32(min(max(status, 0), 999)) + 1)
}

// correct settles the token charge with what the request really cost:
// the difference to the estimate is added to the current window. 0 gives
// the whole charge back (an answer the provider refused spent nothing).
// A cost more than a minute's allowance above the estimate counts as that
// much: the carry into later seconds is bounded by a minute all the same
// (window.next), and so no sum of corrections can overflow. Settle calls
// it, once; in a pool without tokens_per_minute it does nothing.
func (s *Lease) correct(tokens int64) {
	g := s.leases
	tpm := g.limits.Load().enforced.AccountTPM
	if tpm <= 0 {
		return
	}
	if d := min(max(tokens, 0)-s.cost, tpm); d != 0 {
		if s.weight > 0 {
			g.settleFlow(s.class, s.flow, float64(d)/s.weight)
		}
		g.corrections[s.class].Add(d)
		if d < 0 {
			g.sig.tokensFreed.Store(true) // room in this window for those waiting on tokens
		}
		store.Notify(g.sig.freed)
	}
}

// spent records the output tokens the request's response reported, for
// account.output_tokens_per_minute, and, when the lease was answered a
// 2xx, as work done for the adaptive bound (an answer not answered — a
// caller's own key's — counts in none of its measurement); the store
// hears of them with the next call. Past two minutes of the budget, more
// changes nothing (its debt is bounded at a minute), so a report is
// counted at most that. Without that budget it does nothing.
func (s *Lease) spent(output int64) {
	if a := s.answer.Load() - 1; output > 0 && a >= 200 && a < 300 {
		s.leases.adapt.work.Add(output)
	}
	if otpm := s.leases.limits.Load().enforced.OutputTPM; output > 0 && otpm > 0 {
		s.leases.output.Add(min(output, 2*otpm))
	}
}

// Held reports whether the request had to wait for a later window or a
// released slot (its caller's gates' included) before it was admitted.
func (s *Lease) Held() bool { return s.held || s.gate.Held }

// Release returns the slot. It never blocks on the store: the admission
// loop tells the store on its next call. Calls after the first do nothing.
func (s *Lease) Release() {
	if s.released.CompareAndSwap(false, true) {
		s.gate.Release()
		s.leases.inFlight[s.class].Add(-1)
		if !s.granted.IsZero() {
			now := s.leases.now()
			s.leases.adapt.busy.end(s.granted, now)
			if a := s.answer.Load(); a > 0 {
				s.leases.adapt.answered(int(a-1), now.Sub(s.granted))
			}
		}
		store.Notify(s.leases.sig.freed)
	}
}

// heldBy names b as Wait.HeldBy does; a shortfall with no blocker (a
// store that named none) counts as the window's.
func heldBy(b store.Blocker) string {
	switch b {
	case store.BlockedByInFlight:
		return gate.HeldByInFlight
	case store.BlockedByUpstream:
		return gate.HeldByUpstream
	case store.BlockedByOutput:
		return gate.HeldByOutput
	}
	return gate.HeldByWindow
}

// Wait is what the lease's request waited for before it was admitted:
// at its pool when it was held there, else at its caller's gates.
func (s *Lease) Wait() gate.Wait {
	w := s.wait
	if w.HeldBy == "" && s.gate.Held {
		w.HeldBy = s.gate.HeldBy
	}
	return w
}
