// Package store keeps the counters admission decides on: per pool, the
// current one-second window of requests and tokens, the requests in
// flight, the upstream's word (a hold, a 429) and the output budget.
//
// Store is what a pool's limiter (package quota) calls, Take: a TakeRequest
// brings the waiters and the Limits to enforce, and the TakeResult says
// how many of each class go and, for the rest, what held them (Blocker)
// and when to ask again. Memory is the in-process store of a single
// replica; Redis is the fleet's, one take.lua call per Take, windows on
// Redis TIME. GrantAll (grant.go) is the partition rule both follow, and
// the conformance tests hold the two equal.
//
// Failover puts Redis first and follows store.on_error (OnError) when it
// fails, behind a circuit breaker that logs an outage in three lines;
// Call lets the other Redis-backed stores (the caller gates' caps, the
// adaptive bounds) share that breaker. AdaptStore keeps the pools'
// adaptive in-flight bounds (Memory- and Redis-backed, adapt.lua).
// NewRedisClient opens store.redis_url (one server, Cluster, Sentinel,
// TLS with store.tls_ca_file), and RouteRedisLogs brings go-redis's own
// messages into the process's log.
//
// The package imports no other part of quota but its leaves: package
// quota/gate (the caller gates) and package quota (the core) build on it.
package store
