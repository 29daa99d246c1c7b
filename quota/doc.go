// Package quota decides when a request may go upstream.
//
// A Limiter admits requests of two classes (classify.Interactive and
// classify.Bulk) against a partitioned allowance counted in one-second
// windows and a bound on requests in flight. Requests that cannot be
// admitted at once wait, first in first out within their class, for at most
// their class's max_wait in a queue of at most max_queue.
//
// Each class has one dispatcher goroutine that asks its Store for as many
// grants as it has waiters in one call, like a group commit, so a store that
// lives in Redis costs one round trip per batch rather than per request.
// MemoryStore is the in-process store for a single replica.
package quota
