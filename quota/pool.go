package quota

// Pools: admission is keyed by pool. A pool is a complete account of its
// own — its one-second windows, in-flight counts, upstream state,
// credits and queues — served by a limiter of its own
// and kept in Redis under keys of its own. The account is the pool named
// accountPool; until limits per model are configured it is the only one,
// and a request naming a pool that is not configured draws on it.

// accountPool names the account's own pool: the default for every
// request.
const accountPool = ""

// poolKeys are pool's Redis keys under prefix, in take.lua's KEYS order:
// the account's under {prefix}, another pool's under {prefix:pool:<name>},
// so each pool is one hash slot (one Redis Cluster node) of its own.
func poolKeys(prefix, pool string) []string {
	tag := poolTag(prefix, pool)
	return []string{tag + ":window", tag + ":inflight", tag + ":heartbeat", tag + ":starved", tag + ":upstream", tag + ":output"}
}

// poolTag is the hash tag of the Redis keys of the pool whose id is id
// (PoolID) under prefix: {prefix} for the one account's own pool,
// {prefix:pool:<name>} for another of its pools; with several accounts,
// {prefix:acct:<account>} for an account's own and
// {prefix:acct:<account>:pool:<name>} for another of its pools.
func poolTag(prefix, id string) string {
	account, pool := splitPoolID(id)
	if account != "" {
		prefix += ":acct:" + account
	}
	if pool == accountPool {
		return "{" + prefix + "}"
	}
	return "{" + prefix + ":pool:" + pool + "}"
}
