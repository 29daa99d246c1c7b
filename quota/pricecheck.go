package quota

import (
	"fmt"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// unpricedMetric counts requests to models no price matches; PriceGap's
// warning names it.
const unpricedMetric = "meterproxy_unpriced_requests_total"

// validatePrices checks prices: each entry's patterns as account.models'
// are checked (none empty, none an earlier one covers: it could never
// match), its prices (audio's too) and its flex and batch prices finite
// and within [0, maxPrice], cached input in one word only, max_output and
// max_input.
func (c Config) validatePrices(bad func(string, string, ...any)) {
	var patterns firstMatch
	for i, p := range c.Prices {
		key := fmt.Sprintf("prices[%d]", i)
		patterns.check(bad, key+".match", p.Match)
		checkTierPrice(bad, key, TierPrice{Input: p.Input, CachedInput: p.CachedInput, CacheWrite: p.CacheWrite, CacheRead: p.CacheRead, Output: p.Output})
		for _, a := range []struct {
			name string
			usd  float64
		}{{"audio_input", p.AudioInput}, {"audio_output", p.AudioOutput}} {
			if !(a.usd >= 0 && a.usd <= maxPrice) { // NaN too
				bad(key+"."+a.name, "must be a price in USD per million tokens between 0 and %d, got %g", maxPrice, a.usd)
			}
		}
		if p.Flex != nil {
			checkTierPrice(bad, key+".flex", *p.Flex)
		}
		if p.Batch != nil {
			checkTierPrice(bad, key+".batch", *p.Batch)
		}
		if p.MaxOutput < 0 || p.MaxOutput > maxPricedTokens {
			bad(key+".max_output", "must be between 1 and %d tokens (0 or unset = %d), got %d", int64(maxPricedTokens), DefaultMaxOutput, p.MaxOutput)
		}
		if p.MaxInput < 0 || p.MaxInput > maxPricedTokens {
			bad(key+".max_input", "must be between 1 and %d tokens (0 or unset = the model family's context window), got %d", int64(maxPricedTokens), p.MaxInput)
		}
	}
}

// checkTierPrice checks one tier's prices, under key (prices[0],
// prices[0].flex).
func checkTierPrice(bad func(string, string, ...any), key string, t TierPrice) {
	for _, f := range []struct {
		name string
		usd  float64
	}{{"input", t.Input}, {"cached_input", t.CachedInput}, {"cache_write", t.CacheWrite}, {"cache_read", t.CacheRead}, {"output", t.Output}} {
		if !(f.usd >= 0 && f.usd <= maxPrice) { // NaN too
			bad(key+"."+f.name, "must be a price in USD per million tokens between 0 and %d, got %g", maxPrice, f.usd)
		}
	}
	if t.CachedInput != 0 && t.CacheRead != 0 {
		bad(key+".cache_read", "%s and %s both price input read from the prompt cache (OpenAI's word and Anthropic's): set one",
			configcheck.Ref(key+".cached_input"), configcheck.Ref(key+".cache_read"))
	}
}

// PriceGap is a part of the traffic no price covers, so that it would
// cost $0: a check-config warning, not an error.
type PriceGap struct {
	// Key is the account.models pattern no one prices pattern covers
	// ("account.models[0].match[1]"), or "account" for the account's own
	// pool when no price matches every model.
	Key string
	// Pattern is that pattern; "*" for the account's pool.
	Pattern string
}

// String is the warning, "key: what".
func (g PriceGap) String() string {
	what := fmt.Sprintf("no price covers %q", g.Pattern)
	if g.Key == "account" {
		what = `no price matches every model ("*"), and pool default (the account) takes every model account.models does not`
	}
	return fmt.Sprintf("%s: %s: requests to models no price matches cost $0 and are counted in %s", g.Key, what, unpricedMetric)
}

// PriceGaps lists the traffic no price covers, in the configuration's
// order: each account.models pattern that no one prices pattern covers
// (globCovers: a pattern covered only by several together is listed
// too), then the account's own pool unless a price matches every model
// or account.models leaves the account none. It is empty while prices is:
// spend is then not metered at all, and every request costs $0 alike.
func (c Config) PriceGaps() []PriceGap {
	if len(c.Prices) == 0 {
		return nil
	}
	var gaps []PriceGap
	covered := func(q string) bool {
		for _, p := range c.Prices {
			for _, pattern := range p.Match {
				if globCovers(pattern, q) {
					return true
				}
			}
		}
		return false
	}
	poolsTakeAll := false
	for i, m := range c.Account.Models {
		for j, q := range m.Match {
			poolsTakeAll = poolsTakeAll || globCovers(q, "*")
			if !covered(q) {
				gaps = append(gaps, PriceGap{Key: fmt.Sprintf("account.models[%d].match[%d]", i, j), Pattern: q})
			}
		}
	}
	if !poolsTakeAll && !covered("*") {
		gaps = append(gaps, PriceGap{Key: "account", Pattern: "*"})
	}
	return gaps
}
