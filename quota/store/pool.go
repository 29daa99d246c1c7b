package store

import "strings"

// AccountPool names the account's own pool: the default for every
// request.
const AccountPool = ""

// poolKeys are pool's Redis keys under prefix, in take.lua's KEYS order:
// the account's under {prefix}, another pool's under {prefix:pool:<name>},
// so each pool is one hash slot (one Redis Cluster node) of its own.
func poolKeys(prefix, pool string) []string {
	tag := PoolTag(prefix, pool)
	return []string{tag + ":window", tag + ":inflight", tag + ":heartbeat", tag + ":starved", tag + ":upstream", tag + ":output"}
}

// PoolTag is the hash tag of the Redis keys of the pool whose id is id
// (PoolID) under prefix: {prefix} for the one account's own pool,
// {prefix:pool:<name>} for another of its pools; with several accounts,
// {prefix:acct:<account>} for an account's own and
// {prefix:acct:<account>:pool:<name>} for another of its pools.
func PoolTag(prefix, id string) string {
	account, pool := SplitPoolID(id)
	if account != "" {
		prefix += ":acct:" + account
	}
	if pool == AccountPool {
		return "{" + prefix + "}"
	}
	return "{" + prefix + ":pool:" + pool + "}"
}

// AccountSep separates an account's name from its pool's in a pool's id
// (PoolID): neither may contain it (poolName).
const AccountSep = "/"

// PoolID is the id of pool (as PoolAt names it: "" for the
// account's own) of account (as upstream.accounts names it: "" for the
// one account of a configuration without upstream.accounts): the pool's
// key in the Admitter, its limiter's name and its Redis keys' (PoolTag).
// The one account's pools keep the ids they had before accounts existed,
// and so their Redis keys.
func PoolID(account, pool string) string {
	if account == "" {
		return pool
	}
	return account + AccountSep + pool
}

// SplitPoolID is PoolID's inverse.
func SplitPoolID(id string) (account, pool string) {
	if a, p, ok := strings.Cut(id, AccountSep); ok {
		return a, p
	}
	return "", id
}
