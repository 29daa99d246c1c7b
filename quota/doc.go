// Package quota decides when a request may go upstream.
//
// An Admitter (New) admits each Request — a class (classify.Interactive or
// classify.Bulk), a caller and a token estimate — first through its
// caller's gates (its own cap, if it has one: capgate.go), then against
// its pool: a partitioned allowance counted in one-second windows and a
// bound on requests in flight. Requests that cannot be admitted at once
// wait, first in first out within their class, for at most their class's max_wait in a queue of at most
// max_queue; the Lease they get is released when the upstream exchange
// ends. Observe feeds it the provider's word: bulk is held while the
// account is below the interactive reserve, or after a 429. A request
// charged more tokens than one request may be in its pool is refused at
// once, charging nothing (ChargeTooLargeError, charge.go).
//
// Inside, one admission loop (limiter.Run, loop.go) serves both classes:
// it asks its store, in one call, for as many grants as there are waiters
// of either class, like a group commit, and reports releases in the same
// call, so a store that lives in Redis costs one round trip per batch
// rather than per request; far from every limit it takes credits ahead of
// demand (credits.go, prefetch.go). The store decides which waiters go in
// one function, grantInOrder (grant.go), in the order the loop lists
// them; the loop hands each grant to the waiter it was decided for
// (hand.go). memoryStore serves a single replica; redisStore a fleet,
// with take.lua doing the same in one script call, behind a
// failoverStore that applies store.on_error when Redis fails. The caps
// gate counts on its own (capcount.go): in process, or in Redis through
// cap.lua, keyed per caller, behind the same failover.
package quota
