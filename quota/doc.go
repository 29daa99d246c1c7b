// Package quota decides when a request may go upstream: the core that
// imports the other parts. New builds an Admitter from a Config; Admit
// takes a Request and returns a Lease, settled with what the request cost
// (Outcome) and released when it ends, or a refusal. A request passes its
// caller's gates (package quota/gate: caps, spend budgets), then waits in
// its pool's queue — the account or one of account.models, of one of
// upstream.accounts — for the window, in-flight and token room the
// pool's store grants (package quota/store: in process or Redis, with its
// failover). Prices are package quota/price's, model patterns
// quota/glob's, the adaptive in-flight controller quota/adaptive's.
// Imports run one way: quota → gate → store → the leaves.
//
// Waiters are served by caller weight (fairness callers) or in arrival
// order; a request borrows from another account that lends to its class,
// is readmitted at another when the provider refuses it (Readmit), and
// may go at the flex tier (FlexFor). A pool with adaptive_in_flight moves
// its bound from the answers' latency and 429s (adaptrun.go). Observe
// feeds in the provider's rate-limit word; State shows what is held.
package quota
