package main

import (
	"fmt"
	"strings"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// budgetsSection is check-config's account of spend budgets: each one, and
// a warning where the configuration leaves a budget weaker than it reads —
// spend kept nowhere across restarts, no prices to count it by, or a class
// whose unknown callers spend keys of their own.
func budgetsSection(cfg Config) string {
	type named struct {
		name string
		b    classify.Budget
	}
	var bs []named
	for i, c := range cfg.Callers {
		if c.Budget.Set() {
			bs = append(bs, named{fmt.Sprintf("caller:%s (callers[%d].budget)", c.Name, i), c.Budget})
		}
	}
	for _, c := range []struct {
		class string
		b     classify.Budget
	}{{"interactive", cfg.Classes.Interactive.Budget}, {"bulk", cfg.Classes.Bulk.Budget}} {
		if c.b.Set() {
			bs = append(bs, named{fmt.Sprintf("class:%s (classes.%s.budget)", c.class, c.class), c.b})
		}
	}
	if len(bs) == 0 {
		return "budgets: not set (callers[].budget, classes.<class>.budget)\n"
	}
	var out strings.Builder
	unpricedRefused, classBudget := false, false
	for _, n := range bs {
		fmt.Fprintf(&out, "budget %s: $%.2f a %s (UTC), alert at $%.2f; unpriced models %s; APIs meterproxy cannot price (images, audio, …) %s\n",
			n.name, n.b.USD, n.b.Per, n.b.USD*n.b.Alert(), map[bool]string{true: "pass at $0", false: "refused"}[n.b.Unpriced.Allows()],
			map[bool]string{true: "charged their worst case", false: "refused (unpriced_apis)"}[n.b.UnpricedAPIs.WorstCase()])
		unpricedRefused = unpricedRefused || !n.b.Unpriced.Allows()
		classBudget = classBudget || strings.HasPrefix(n.name, "class:")
	}
	passThrough := cfg.Upstream.APIKey == "" && len(cfg.Upstream.Accounts) == 0
	if classBudget && passThrough && cfg.Classify.UnknownCallers != classify.UnknownReject {
		out.WriteString("warning: classes.<class>.budget: without upstream.api_key an unknown caller spends its own key, another account, which no budget holds; " +
			"set classify.unknown_callers: reject for a class's budget to hold all of its requests\n")
	}
	if cfg.Store.RedisURL == "" && cfg.Store.SpendFile == "" {
		out.WriteString("warning: store.spend_file is not set and there is no Redis: budgets' spend is kept in memory and starts from $0 at every restart\n")
	}
	if cfg.Store.Shared() {
		out.WriteString(storeErrorLine(cfg))
	}
	if len(cfg.Prices) == 0 && unpricedRefused {
		out.WriteString("warning: prices: none configured: every budgeted request that names a model is refused as unpriced_model\n")
	}
	return out.String()
}

// storeErrorLine is check-config's line on what budgets do while Redis
// fails (budgets.on_store_error), and its warning when local shares are
// cut for one replica (expected_replicas 1: each replica alone may spend
// all that was left).
func storeErrorLine(cfg Config) string {
	if cfg.Budgets.OnStoreError != gate.StoreErrorLocal {
		return "budgets while Redis fails: refused, 503 store_unavailable (budgets.on_store_error: closed)\n"
	}
	q := cfg.quota()
	n := q.Account.ExpectedReplicas // as quota sizes the shares: the most of any account's
	for _, a := range q.Accounts {
		n = max(n, a.Account.ExpectedReplicas)
	}
	line := fmt.Sprintf("budgets while Redis fails: each replica spends at most what a budget had left ÷ %d (budgets.on_store_error: local), added to Redis's spend when it returns\n", n)
	if n == 1 {
		line += "warning: budgets.on_store_error is local and account.expected_replicas is 1: while Redis is out every replica may spend all that a budget had left, " +
			"and N replicas N times that: set it to the number of replicas you run\n"
	}
	return line
}
