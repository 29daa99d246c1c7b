package main

import (
	"fmt"
	"strings"

	"github.com/meterproxy/meterproxy/classify"
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
	if len(cfg.Prices) == 0 && unpricedRefused {
		out.WriteString("warning: prices: none configured: every budgeted request that names a model is refused as unpriced_model\n")
	}
	return out.String()
}
