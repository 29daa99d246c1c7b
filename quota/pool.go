package quota

// Pools: admission is keyed by pool. A pool is a complete account of its
// own — its one-second windows, in-flight counts, upstream state,
// credits and queues — served by a limiter of its own
// and kept in Redis under keys of its own. The account is the pool named
// accountPool; until limits per model are configured it is the only one,
// and a request naming a pool that is not configured draws on it.
