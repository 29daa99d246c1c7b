package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
)

// Request is one request to admit.
type Request struct {
	Class classify.Class
	// Caller is the configured caller's name, or classify.UnknownCaller.
	Caller string
	// Anonymous tells unknown callers apart for fair queuing
	// (classify.Result.Anonymous); 0 for a configured caller or none.
	Anonymous uint64
	// Tokens is what the provider would charge the request, as the caller
	// estimates it. Admit charges it to the token window of the request's
	// pool when that pool enforces tokens (its own tokens_per_minute), and
	// nothing there otherwise (Config.charge); Lease.Settle settles it.
	Tokens int64
	// Model is the request's model, which prices it for its budgets.
	Model Model
	// CostBounds are what it may cost in tokens at most, for its budgets.
	CostBounds
	// Free says the request costs this account nothing, so no budget
	// holds it: it generates nothing (a read, a delete, a token count),
	// or it spends another account (a pass-through caller's own key).
	// The zero value may cost money.
	Free bool
	// Unmetered says the request may cost money on an API whose answers
	// report no usage the proxy reads (images, audio): a budget
	// refuses it unless its unpriced_apis is worst_case, and then it is
	// settled at its worst case (Lease.Settle, Usage.Worst).
	Unmetered bool
	// Account, when Pinned, is the one account the request may be
	// admitted at, whatever else its class may borrow from: a WebSocket
	// turn's, whose connection goes to one account. It must be one its
	// class may go to (HomeAccount is).
	Account string
	Pinned  bool
	// Accounts, when not nil, are the only accounts the request may be
	// admitted at, borrowing and moves included: those that serve its
	// API (the proxy's to say, from its path and each account's
	// provider). nil is every account its class may go to.
	Accounts []string
	// admission is what Admit works out for it.
	admission
}

// gate is what the caller gates know of r.
func (r Request) gate() gate.Request {
	return gate.Request{Caller: r.Caller, Class: r.Class, Cost: r.cost, Floor: r.floor, Priced: r.priced, Model: r.Model.Name, Generates: !r.Free,
		Unmetered: r.Unmetered, Simulated: r.simulated}
}

// CostBounds are what a Request may cost in tokens at most, for its
// budgets (price.Price.WorstCase), in Request.
type CostBounds struct {
	// InputTokens and OutputTokens are what the request may cost in
	// tokens at most, for its budgets: its input estimate, and its output
	// cap (0: none set, and the price's max_output counts), its
	// max_tokens times Generations.
	InputTokens, OutputTokens int64
	// Generations is how many answers the request asks the model for (n,
	// best_of; 0 counts as 1): a price's max_output caps each of them
	// (price.Price.OutputCap).
	Generations int64
	// HiddenInput says the provider may bill it input its body does not
	// show (usage.Request.HiddenInput): its budgets reserve its input at
	// its price's max_input, and cut that to what they have left rather
	// than refuse it (reservation; package quota/gate's budgetcut.go).
	// LongContext says
	// it asks for a context beyond its model family's (Anthropic's
	// context-1m beta): an unset max_input is then price.FallbackMaxInput.
	HiddenInput, LongContext bool
	// Tier is the service tier the request is sent at ("flex" or "").
	Tier string
}

// admission is what Admit works out for a Request.
type admission struct {
	// until, when set, ends the wait before the class's max_wait: what is
	// left of it after the caller's gates (admitThrough).
	until time.Time
	// pool is the pool it draws on at the account a route admits it at,
	// picked there from Model (Config.PoolFor) and set by the route
	// (route.admit): the one place a pool is chosen. "" is the account's.
	pool string
	// cost and priced are its worst case at its model's price, and
	// whether a price matched its model; floor the least its budgets may
	// cut the reservation of cost to (reservation). Admit sets them.
	cost, floor price.Nanodollars
	priced      bool
	// simulated says it is a shadow decision's (Admitter.Simulate).
	simulated bool
}
