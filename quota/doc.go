// Package quota decides when a request may go upstream.
//
// New builds an Admitter from a Config and Deps; it serves until Run's
// context ends and follows reloads (Reconfigure). Admit takes a Request —
// pool (PoolFor), class, caller, token estimate — and returns a Lease, to
// settle with what the request cost and release when the exchange ends, or
// a refusal (RefusedError, ChargeTooLargeError). What the request costs in
// its pool is decided here alone: its token estimate where the pool
// enforces tokens_per_minute, nothing in tokens where it does not.
// Observe feeds it the provider's rate-limit word; State shows what it
// holds.
//
// A capped caller's request first passes its caller's gate (max_in_flight,
// requests_per_minute, fleet-wide), then its pool, the account or one of
// account.models: requests and tokens in one-second windows partitioned
// between interactive and bulk, a bound on requests in flight, and bulk
// held while the provider reports the pool short of the interactive
// reserve or after a 429. Waiters queue for at most max_wait, served by
// caller weight (fairness "callers", the default) or in arrival order
// ("fifo").
//
// Several accounts (Config.Accounts, upstream.accounts) each have their
// pools; a request is admitted at its caller's home account or borrows
// from one that lends to its class, and may be readmitted at another when
// the provider refuses it there (Readmit: a spill). A pool with
// adaptive_in_flight moves its in-flight bound itself from the answers'
// latency and 429s (adaptive*.go; the controller is a clock-free value,
// its state kept fleet-wide in the store). A request may be sent at the
// flex tier (FlexFor) when its pool and price allow it.
//
// Spend budgets (callers[].budget, classes.<class>.budget) are a caller
// gate of their own (gate.BudgetGate): a request's worst case is reserved
// before it waits, and its Lease settles what it cost; batches reserve at
// creation and settle when the provider ends them (EndBatch).
//
// What a request costs in dollars is package quota/price's: Config.Prices
// is its price.Table, whose For finds the Price of a model; a Lease
// settles a response's Cost at it. Model-name patterns (account.models,
// prices, flex_models) are package quota/glob's.
//
// With store.redis the limits are the fleet's, kept in Redis at one script
// call per batch of waiters, and store.on_error says what happens when
// Redis fails; without it each replica enforces its share in process.
package quota
