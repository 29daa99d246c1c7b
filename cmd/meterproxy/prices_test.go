package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// issuePricesYAML is issue 25's prices block, and a pool for gpt-4o.
const issuePricesYAML = `account:
  models:
    - {name: gpt-4o, match: ["gpt-4o", "gpt-4o-2024-*"], requests_per_minute: 5000, max_in_flight: 100}
    - {name: mini, match: ["gpt-4o-mini*", "gpt-4.1-nano*"], requests_per_minute: 30000, max_in_flight: 150}
prices:                         # USD per million tokens; first match wins (same globs as account.models)
  - {match: ["gpt-4o", "gpt-4o-2024-*"], input: 2.50, cached_input: 1.25, output: 10.00, flex: {input: 1.25, cached_input: 0.625, output: 5.00}}
  - {match: ["claude-sonnet-4*"], input: 3.00, cache_write: 3.75, cache_read: 0.30, output: 15.00, max_output: 64000, max_input: 1000000}
`

// TestLoadConfigPrices: the prices block is read whole, flex included,
// and reaches quota's configuration, which prices by it.
func TestLoadConfigPrices(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, issuePricesYAML), nil, lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := price.Table{
		{Match: []string{"gpt-4o", "gpt-4o-2024-*"}, Input: 2.50, CachedInput: 1.25, Output: 10.00,
			Flex: &price.TierPrice{Input: 1.25, CachedInput: 0.625, Output: 5.00}},
		{Match: []string{"claude-sonnet-4*"}, Input: 3.00, CacheWrite: 3.75, CacheRead: 0.30, Output: 15.00, MaxOutput: 64000, MaxInput: 1_000_000},
	}
	if !reflect.DeepEqual(cfg.Prices, want) {
		t.Fatalf("prices = %+v, want %+v", cfg.Prices, want)
	}
	q := cfg.quota()
	p := q.Prices.For("gpt-4o-2024-08-06", false)
	ok := p != nil
	// 1000 input at 1.25 + 100 output at 5.00, flex: 1,250,000 + 500,000.
	if cost := p.Cost(price.Usage{Input: 1000, Output: 100, Tier: price.TierFlex}); !ok || cost != 1_750_000 {
		t.Errorf("gpt-4o-2024-08-06 at flex: priced %v, cost %s; want $0.00175", ok, cost)
	}
	if q.Prices.For("gpt-4o-mini", false) != nil {
		t.Error("gpt-4o-mini has a price; none matches it")
	}
}

// TestCheckConfigPrices: check-config shows each entry's prices with
// every fallback applied, the flex row, and warns — without failing — for
// each pool pattern no price covers and for the account's own pool; with
// no prices it says so in one line and warns of nothing.
func TestCheckConfigPrices(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		want      []string // regular expressions the output matches
		notWanted []string
	}{
		{"issue 25's prices", issuePricesYAML, []string{
			`prices \(USD per million tokens\)\s+input\s+cached input\s+cache write\s+output\s+max output \(tokens\)\s+max input \(tokens\)\n`,
			`prices\[0\] gpt-4o gpt-4o-2024-\*\s+2\.50\s+1\.25\s+2\.50\s+10\.00\s+4096 \(default\)\s+model family's \(default\)\n`,
			`  at service_tier flex\s+1\.25\s+0\.625\s+1\.25\s+5\.00\n`,
			`prices\[1\] claude-sonnet-4\*\s+3\.00\s+0\.30\s+3\.75\s+15\.00\s+64000\s+1000000\n`,
			`warning: account\.models\[1\]\.match\[0\]: no price covers "gpt-4o-mini\*": requests to models no price matches cost \$0 and are counted in meterproxy_unpriced_requests_total\n`,
			`warning: account\.models\[1\]\.match\[1\]: no price covers "gpt-4\.1-nano\*"`,
			`warning: account: no price matches every model \("\*"\)`,
		}, []string{`warning: account\.models\[0\]`, `none configured`}},
		{"a catch-all price", issuePricesYAML + `  - {match: ["*"], input: 10, output: 30}` + "\n",
			[]string{`prices\[2\] \*\s+10\.00\s+10\.00\s+10\.00\s+30\.00`}, []string{`warning`}},
		{"audio prices", issuePricesYAML + `  - {match: ["gpt-realtime*"], input: 4, cached_input: 0.4, output: 16, audio_input: 32, audio_output: 64}` + "\n",
			[]string{`prices\[2\] gpt-realtime\*\s+4\.00\s+0\.40\s+4\.00\s+16\.00`, `\n  audio tokens\s+32\.00\s+0\.40\s+64\.00\n`}, nil},
		{"no prices", "account:\n  models:\n    - {name: a, match: [x], requests_per_minute: 1, max_in_flight: 1}\n",
			[]string{`\nprices: none configured: every request costs \$0 \(spend is not metered\)\n`}, []string{`warning`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(t.Context(), []string{"check-config", "--config", writeConfig(t, tt.yaml)}, nil, &out, &errOut); err != nil {
				t.Fatalf("check-config: %v\n%s", err, errOut.String())
			}
			for _, want := range tt.want {
				if !regexp.MustCompile(want).MatchString(out.String()) {
					t.Errorf("check-config output lacks %s:\n%s", want, out.String())
				}
			}
			for _, not := range tt.notWanted {
				if regexp.MustCompile(not).MatchString(out.String()) {
					t.Errorf("check-config output has %s:\n%s", not, out.String())
				}
			}
		})
	}
}

// FuzzPricesConfig: any prices block through loadConfig never panics, and
// every accepted one prices within the invariants: costs that are never
// negative nor above the worst case of the same counts, effective prices
// that are never negative, and a model an entry matches priced by that
// entry or an earlier one (first match wins).
func FuzzPricesConfig(f *testing.F) {
	for _, seed := range []string{
		"  - {match: [\"gpt-4o\", \"gpt-4o-2024-*\"], input: 2.50, cached_input: 1.25, output: 10.00, flex: {input: 1.25, cached_input: 0.625, output: 5.00}}\n" +
			"  - {match: [\"claude-sonnet-4*\"], input: 3.00, cache_write: 3.75, cache_read: 0.30, output: 15.00}\n",
		"  - {match: [\"*\"], input: .nan, output: .inf}\n",
		"  - {match: [gpt-realtime], input: 4, output: 16, audio_input: 32, audio_output: -64}\n",
		"  - {match: [m], input: -1, flex: {output: 1e400}, max_output: 281474976710657}\n",
		"  - {match: [m], input: 10000, cache_write: 10000, output: 10000, max_output: 281474976710656}\n",
		"  - match: m\n    input: \"2.5\"\n    flex: {}\n",
		"  - {match: [a, \"*\"], cached_input: 1, cache_read: 1}\n  - {match: [b]}\n",
		"  - &a {match: [x], input: 1}\n  - *a\n",
		"  [[[[[[[[[[]]]]]]]]]]\n",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, block string) {
		if len(block) > 4096 {
			return // a config file, not a stress test of the YAML parser
		}
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte("prices:\n"+block), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(path, nil, lookupIn(nil))
		if err != nil {
			return
		}
		q := cfg.quota()
		for i, p := range q.Prices {
			for _, tier := range []string{"", price.TierFlex} {
				u := price.Usage{Input: 12_100, CacheRead: 10_000, CacheWrite: 2000, Output: 300, Tier: tier, AudioInput: 100, AudioOutput: 200}
				cost, worst := p.Cost(u), p.WorstCase(u.Input, u.Output, tier)
				if cost < 0 || cost > worst {
					t.Fatalf("prices[%d] %+v at %q: cost %d, worst case %d", i, p, tier, cost, worst)
				}
				if e := p.Effective(tier); e.Input < 0 || e.CachedInput < 0 || e.CacheWrite < 0 || e.Output < 0 || e.CacheRead != 0 {
					t.Fatalf("prices[%d] at %q: effective prices %+v", i, tier, e)
				}
			}
			for _, m := range p.Match { // a model this entry matches is priced by it or an earlier one
				got := q.Prices.For(strings.ReplaceAll(m, "*", "x"), false)
				j := slices.IndexFunc(q.Prices, func(e price.Price) bool { return got != nil && reflect.DeepEqual(e, *got) })
				if got == nil || j < 0 || j > i {
					t.Fatalf("model %q of prices[%d] %v is priced by %v", m, i, p.Match, got)
				}
			}
		}
	})
}

// TestLoadConfigBudgets: issue 25's budget keys load as written, and a
// config without them (every default) has none.
func TestLoadConfigBudgets(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "classes:\n  bulk: {budget: {usd: 1000, per: month}}\n"+
		"callers:\n  - {name: nightly-import, key_env: IMPORT_KEY, class: bulk, budget: {usd: 200, per: month, unpriced: allow}}\n"),
		nil, lookupIn([]string{"IMPORT_KEY=sk-import"}))
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Classes.Bulk.Budget; b != (classify.Budget{USD: 1000, Per: classify.PerMonth}) {
		t.Errorf("classes.bulk.budget = %+v", b)
	}
	if b := cfg.Callers[0].Budget; b != (classify.Budget{USD: 200, Per: classify.PerMonth, Unpriced: classify.UnpricedAllow}) {
		t.Errorf("callers[0].budget = %+v", b)
	}
	def, err := loadConfig("", nil, lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	if def.Classes.Bulk.Budget.Set() || def.Classes.Interactive.Budget.Set() {
		t.Errorf("the defaults hold a budget: %+v %+v", def.Classes.Bulk.Budget, def.Classes.Interactive.Budget)
	}
}
