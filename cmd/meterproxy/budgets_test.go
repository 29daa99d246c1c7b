package main

import (
	"strings"
	"testing"
)

// TestCheckConfigBudgets: check-config lists each budget with its period,
// alert threshold and unpriced policies (models and APIs), and warns when
// spend would not survive a restart, no price can count it, or a class's
// unknown callers spend keys of their own (pass-through).
func TestCheckConfigBudgets(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want, not  []string
	}{
		{"none", "", []string{"budgets: not set (callers[].budget, classes.<class>.budget)\n"}, []string{"warning: store.spend_file"}},
		{"in memory, no prices", "classes: {bulk: {budget: {usd: 1000, per: month}}}\n" +
			"callers:\n  - {name: nightly-import, key_env: IMPORT_KEY, class: bulk, budget: {usd: 200, per: day, alert_at: 0.9}}\n",
			[]string{
				"budget caller:nightly-import (callers[0].budget): $200.00 a day (UTC), alert at $180.00; unpriced models refused; " +
					"APIs meterproxy cannot price (images, audio, …) refused (unpriced_apis)\n",
				"budget class:bulk (classes.bulk.budget): $1000.00 a month (UTC), alert at $800.00; unpriced models refused; " +
					"APIs meterproxy cannot price (images, audio, …) refused (unpriced_apis)\n",
				"warning: classes.<class>.budget: without upstream.api_key an unknown caller spends its own key",
				"warning: store.spend_file is not set and there is no Redis",
				"warning: prices: none configured: every budgeted request that names a model is refused as unpriced_model\n",
			}, nil},
		{"kept in a file, priced", "store: {spend_file: /var/lib/meterproxy/spend.json}\nprices: [{match: ['*'], input: 1, output: 2}]\n" +
			"classes: {bulk: {budget: {usd: 10, per: day, unpriced: allow, unpriced_apis: worst_case}}}\nclassify: {unknown_callers: reject}\n",
			[]string{"budget class:bulk (classes.bulk.budget): $10.00 a day (UTC), alert at $8.00; unpriced models pass at $0; " +
				"APIs meterproxy cannot price (images, audio, …) charged their worst case\n"},
			[]string{"warning: store.spend_file", "warning: prices", "warning: classes"}},
		// Issue 37 item 3: what budgets do while Redis fails.
		{"on Redis, closed", "store: {redis_url: \"redis://127.0.0.1:6379/0\"}\nclasses: {bulk: {budget: {usd: 10, per: day}}}\n",
			[]string{"budgets while Redis fails: refused, 503 store_unavailable (budgets.on_store_error: closed)\n"}, []string{"warning: budgets.on_store_error"}},
		{"on Redis, local, one replica", "store: {redis_url: \"redis://127.0.0.1:6379/0\"}\nbudgets: {on_store_error: local}\nclasses: {bulk: {budget: {usd: 10, per: day}}}\n",
			[]string{"÷ 1 (budgets.on_store_error: local)", "warning: budgets.on_store_error is local and account.expected_replicas is 1"}, nil},
		{"on Redis, local, three replicas", "store: {redis_url: \"redis://127.0.0.1:6379/0\"}\nbudgets: {on_store_error: local}\naccount: {expected_replicas: 3}\n" +
			"classes: {bulk: {budget: {usd: 10, per: day}}}\n", []string{"each replica spends at most what a budget had left ÷ 3"}, []string{"warning: budgets.on_store_error"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, c.yaml), nil, lookupIn([]string{"IMPORT_KEY=sk-import"}))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := checkConfig(cfg, &out); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("check-config does not say %q:\n%s", w, out.String())
				}
			}
			for _, n := range c.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("check-config says %q:\n%s", n, out.String())
				}
			}
		})
	}
}
