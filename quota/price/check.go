package price

import (
	"fmt"

	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota/glob"
)

// unpricedMetric counts requests to models no price matches; Gap's
// warning names it.
const unpricedMetric = "meterproxy_unpriced_requests_total"

// Validate checks the prices list, each problem under its key
// (prices[0].input) through bad, as quota's Config.Validate reports them:
// each entry's patterns as account.models' are checked (none empty, none
// an earlier one covers: it could never match), its prices (audio's too) and its flex and batch prices finite
// and within [0, maxPrice], cached input in one word only, max_output and
// max_input.
func (t Table) Validate(bad func(string, string, ...any)) {
	var patterns glob.FirstMatch
	for i, p := range t {
		key := fmt.Sprintf("prices[%d]", i)
		patterns.Check(bad, key+".match", p.Match)
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

// Gap is a part of the traffic no price covers, so that it would
// cost $0: a check-config warning, not an error.
type Gap struct {
	// Key is the account.models pattern no one prices pattern covers
	// ("account.models[0].match[1]"), or "account" for the account's own
	// pool when no price matches every model.
	Key string
	// Pattern is that pattern; "*" for the account's pool.
	Pattern string
}

// String is the warning, "key: what".
func (g Gap) String() string {
	what := fmt.Sprintf("no price covers %q", g.Pattern)
	if g.Key == "account" {
		what = `no price matches every model ("*"), and pool default (the account) takes every model account.models does not`
	}
	return fmt.Sprintf("%s: %s: requests to models no price matches cost $0 and are counted in %s", g.Key, what, unpricedMetric)
}

// Gaps lists the traffic no price covers, in the configuration's order:
// each pattern of account.models (pools, each entry's match list) that no
// one prices pattern covers (glob.Covers: a pattern covered only by
// several together is listed too), then the account's own pool unless a
// price matches every model or account.models leaves the account none. It
// is empty while t is: spend is then not metered at all, and every
// request costs $0 alike.
func (t Table) Gaps(pools [][]string) []Gap {
	if len(t) == 0 {
		return nil
	}
	var gaps []Gap
	covered := func(q string) bool {
		for _, p := range t {
			for _, pattern := range p.Match {
				if glob.Covers(pattern, q) {
					return true
				}
			}
		}
		return false
	}
	poolsTakeAll := false
	for i, match := range pools {
		for j, q := range match {
			poolsTakeAll = poolsTakeAll || glob.Covers(q, "*")
			if !covered(q) {
				gaps = append(gaps, Gap{Key: fmt.Sprintf("account.models[%d].match[%d]", i, j), Pattern: q})
			}
		}
	}
	if !poolsTakeAll && !covered("*") {
		gaps = append(gaps, Gap{Key: "account", Pattern: "*"})
	}
	return gaps
}
