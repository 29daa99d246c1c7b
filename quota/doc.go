// Package quota decides when a request may go upstream.
//
// A Limiter admits requests of two classes (classify.Interactive and
// classify.Bulk) against a partitioned allowance counted in one-second
// windows and a bound on requests in flight. Requests that cannot be
// admitted at once wait, first in first out within their class, for at most
// their class's max_wait in a queue of at most max_queue.
//
// One admission loop (Limiter.Run) serves both classes: it asks its Store,
// in one call, for as many grants as there are waiters of either class,
// like a group commit, and reports releases in the same call, so a store
// that lives in Redis costs one round trip per batch rather than per
// request. MemoryStore serves a single replica; RedisStore a fleet, behind
// a FailoverStore that applies store.on_error when Redis fails. Caps wraps
// a Limiter with per-caller caps.
package quota
