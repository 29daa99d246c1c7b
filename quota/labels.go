package quota

import (
	"log/slog"

	"github.com/meterproxy/meterproxy/quota/store"
)

// How metrics and logs name a pool: by two labels, its account and its
// own name, so that a dashboard can select an account and aggregate by
// pool across accounts, where one joined name ("chat-project/gpt-4o")
// would have to be taken apart by regular expression.

// DefaultAccount is the account label of the one account of a
// configuration without upstream.accounts: "default", as an account's own
// pool is DefaultPool. With upstream.accounts every account is labelled by
// its configured name.
const DefaultAccount = "default"

// Labels are a pool's account and pool labels, as metrics and logs name
// it. The zero value is no pool: a request counted before its pool was
// known.
type Labels struct {
	// Account is the account's configured name, or DefaultAccount for the
	// one account of a configuration without upstream.accounts.
	Account string
	// Pool is the pool's own name: DefaultPool for its account's own, else
	// the name account.models gives it. It never names the account.
	Pool string
}

// LabelsOf is the labels of pool (as PoolAt names it: "" for the
// account's own) of account (as upstream.accounts names it: "" for the one
// account of a configuration without upstream.accounts). It allocates
// nothing, so the request path may call it.
func LabelsOf(account, pool string) Labels {
	if account == "" {
		account = DefaultAccount
	}
	if pool == store.AccountPool {
		pool = DefaultPool
	}
	return Labels{Account: account, Pool: pool}
}

// poolLabels is the labels of the pool whose id is id (PoolID).
func poolLabels(id string) Labels { return LabelsOf(store.SplitPoolID(id)) }

// StateName is pool of account (as LabelsOf takes them) as /admin/state
// names it: its pool label alone for the one account, after its account's
// name and a slash with several ("chat-project/default"). /admin/state
// kept the names it had before metrics gained the account label.
func StateName(account, pool string) string {
	l := LabelsOf(account, pool)
	if account == "" {
		return l.Pool
	}
	return account + store.AccountSep + l.Pool
}

// stateName is the pool whose id is id (PoolID) as /admin/state names it.
func stateName(id string) string { return StateName(store.SplitPoolID(id)) }

// poolLogAttrs are the pool whose id is id as logs name it: its pool
// label, with its account's name beside it when there are several
// accounts (the one account is never named: there is no other).
func poolLogAttrs(id string) []any {
	account, _ := store.SplitPoolID(id)
	pool := slog.String("pool", poolLabels(id).Pool)
	if account == "" {
		return []any{pool}
	}
	return []any{slog.String("account", account), pool}
}
