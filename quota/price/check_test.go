package price

import (
	"math"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// TestPricesValidate: every problem of the prices list is refused, naming
// its key; issue 25's entries pass.
func TestPricesValidate(t *testing.T) {
	ok := func(match ...string) Price { return Price{Match: match, Input: 1, Output: 2} }
	tests := []struct {
		name   string
		prices []Price
		want   []string // each must appear in the error; none: valid
	}{
		{"issue 25's entries", issuePrices(), nil},
		{"free, and the most", []Price{{Match: []string{"local-*"}}, {Match: []string{"dear"}, Input: maxPrice, Output: maxPrice, MaxOutput: 1 << 48, MaxInput: 1 << 48}}, nil},
		{"empty match", []Price{{Input: 1}}, []string{"prices[0].match: must list at least one model name or pattern"}},
		{"invalid patterns", []Price{ok("", "gpt 4", strings.Repeat("x", 300))},
			[]string{"prices[0].match[0]: must not be empty", "prices[0].match[1]: must not hold spaces", "prices[0].match[2]: must be at most 256 bytes"}},
		{"covered by an earlier entry", []Price{ok("gpt-4o*"), ok("gpt-4o-mini*")},
			[]string{`prices[1].match[0]: "gpt-4o-mini*" can never match: prices[0].match[0] ("gpt-4o*") matches every model it does`}},
		{"covered within an entry", []Price{ok("*", "x")}, []string{`prices[0].match[1]: "x" can never match`}},
		{"numbers", []Price{{Match: []string{"m"}, Input: -1, CachedInput: math.NaN(), CacheWrite: math.Inf(1), Output: maxPrice + 1, MaxOutput: -1}},
			[]string{"prices[0].input: must be a price in USD per million tokens between 0 and 10000, got -1",
				"prices[0].cached_input: must be a price in USD per million tokens between 0 and 10000, got NaN",
				"prices[0].cache_write: must be a price in USD per million tokens between 0 and 10000, got +Inf",
				"prices[0].output: must be a price in USD per million tokens between 0 and 10000, got 10001",
				"prices[0].max_output: must be between 1 and 281474976710656 tokens (0 or unset = 4096), got -1"}},
		{"a negative cache read", []Price{{Match: []string{"m"}, CacheRead: -0.3}}, []string{"prices[0].cache_read: must be a price"}},
		{"max_output above 2^48", []Price{{Match: []string{"m"}, MaxOutput: 1<<48 + 1}}, []string{"prices[0].max_output: must be between 1 and"}},
		{"max_input below 0", []Price{{Match: []string{"m"}, MaxInput: -1}},
			[]string{"prices[0].max_input: must be between 1 and 281474976710656 tokens (0 or unset = the model family's context window), got -1"}},
		{"max_input above 2^48", []Price{{Match: []string{"m"}, MaxInput: 1<<48 + 1}}, []string{"prices[0].max_input: must be between 1 and"}},
		{"cached input in both words", []Price{{Match: []string{"m"}, Input: 3, CachedInput: 0.3, CacheRead: 0.3}},
			[]string{"prices[0].cache_read: prices[0].cached_input and prices[0].cache_read both price input read from the prompt cache"}},
		{"flex numbers", []Price{{Match: []string{"m"}, Input: 2, Flex: &TierPrice{Input: math.Inf(-1), CachedInput: -0.5, CacheWrite: 1e6, CacheRead: math.NaN(), Output: -1}}},
			[]string{"prices[0].flex.input: must be a price", "prices[0].flex.cached_input: must be a price", "prices[0].flex.cache_write: must be a price",
				"prices[0].flex.cache_read: must be a price", "prices[0].flex.output: must be a price"}},
		{"flex cached input in both words", []Price{ok("a"), {Match: []string{"m"}, Flex: &TierPrice{CachedInput: 1, CacheRead: 1}}},
			[]string{"prices[1].flex.cache_read: prices[1].flex.cached_input and prices[1].flex.cache_read both price"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var problems configcheck.Problems
			Table(tt.prices).Validate(problems.Add)
			err := problems.Err()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused a valid config: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestPriceGaps: every account.models pattern no one price pattern covers
// is listed, then the account's own pool unless a price matches every
// model or the pools leave the account nothing; nothing while no price is
// configured.
func TestPriceGaps(t *testing.T) {
	pools := [][]string{ // account.models' match lists
		{"gpt-4o", "gpt-4o-2024-*"},
		{"gpt-4o-mini*", "gpt-4.1-nano*"},
		{"claude-*"},
	}
	tests := []struct {
		name   string
		pools  [][]string
		prices []Price
		want   []string // the gaps' keys
	}{
		{"no prices", pools, nil, nil},
		{"issue 25's entries", pools, issuePrices(),
			[]string{"account.models[1].match[1]", "account.models[2].match[0]", "account"}},
		{"a catch-all price", pools, append(issuePrices(), Price{Match: []string{"*"}}), nil},
		{"covered by a wider price", pools[:1], []Price{{Match: []string{"gpt-*"}}}, []string{"account"}},
		{"pools take every model", [][]string{{"*"}}, []Price{{Match: []string{"x"}}},
			[]string{"account.models[0].match[0]"}},
		{"no pools", nil, []Price{{Match: []string{"x"}}}, []string{"account"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gaps := Table(tt.prices).Gaps(tt.pools)
			var keys []string
			for _, g := range gaps {
				keys = append(keys, g.Key)
				if !strings.Contains(g.String(), "cost $0 and are counted in meterproxy_unpriced_requests_total") {
					t.Errorf("warning %q does not say what it costs", g)
				}
			}
			if strings.Join(keys, " ") != strings.Join(tt.want, " ") {
				t.Errorf("gaps %v, want %v", keys, tt.want)
			}
		})
	}
	if got, want := Table(issuePrices()).Gaps(pools)[0].String(), `account.models[1].match[1]: no price covers "gpt-4.1-nano*": requests to models no price matches cost $0`; !strings.HasPrefix(got, want) {
		t.Errorf("warning %q, want it to start %q", got, want)
	}
}
