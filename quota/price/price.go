package price

import (
	"math"
	"slices"
	"strings"

	"github.com/meterproxy/meterproxy/quota/glob"
)

// Price is one entry of the prices list: what the models it matches cost,
// in US dollars per million tokens, at the provider's default tier and at
// the flex tier. The YAML keys are the koanf tags. A price left 0 (unset)
// where its field names a fallback takes the fallback: cached input and
// cache writes the entry's Input, a flex price the default tier's. Cached
// and flex prices are below those, so leaving them unset never
// under-counts; cache writes cost more than input on Anthropic, so set
// CacheWrite there. The zero value matches nothing. A Price is a value,
// safe for concurrent use.
type Price struct {
	// Match lists the model names it prices, * a wildcard for any run of
	// characters, matched as account.models' are (an Azure deployment
	// regardless of case); the first entry that matches wins.
	Match []string `koanf:"match"`
	// Input prices input tokens not read from the prompt cache, USD per
	// million; 0 means free.
	Input float64 `koanf:"input"`
	// CachedInput prices input tokens read from the prompt cache, USD per
	// million: OpenAI's word. CacheRead is the same price in Anthropic's
	// word; an entry sets at most one of them. Both 0 (unset): cached
	// input costs the input price (Input).
	CachedInput float64 `koanf:"cached_input"`
	// CacheWrite prices input tokens written to the prompt cache, USD per
	// million (Anthropic charges them above Input); 0 (unset) means the
	// input price.
	CacheWrite float64 `koanf:"cache_write"`
	// CacheRead is CachedInput in Anthropic's word (see CachedInput).
	CacheRead float64 `koanf:"cache_read"`
	// Output prices output tokens, reasoning tokens included, USD per
	// million; 0 means free.
	Output float64 `koanf:"output"`
	// AudioInput prices the audio tokens of input not read from the cache
	// (a Realtime session's), USD per million, at every tier; 0 (unset)
	// means the tier's input price. Audio read from the cache costs the
	// cached input price.
	AudioInput float64 `koanf:"audio_input"`
	// AudioOutput prices the audio tokens of output (a Realtime
	// session's), USD per million, at every tier; 0 (unset) means the
	// tier's output price.
	AudioOutput float64 `koanf:"audio_output"`
	// MaxOutput is the most output tokens the model generates in one
	// response: the output a budget reserves for a request that sets no
	// max_tokens (WorstCase). 0 (unset) means DefaultMaxOutput, 4096.
	MaxOutput int64 `koanf:"max_output"`
	// MaxInput is the most input tokens the model reads in one request:
	// the input a budget reserves for a request whose body does not show
	// all it is billed for (a previous_response_id, an image, a server
	// tool; WorstCase at quota.Request.HiddenInput). 0 (unset) means
	// DefaultMaxInput of the request's model: its family's context window
	// (see "Prices"), else 1,048,576.
	MaxInput int64 `koanf:"max_input"`
	// Flex is the prices of a response that says service_tier "flex";
	// each it leaves unset (0) is the default tier's, and nil prices flex
	// at the default tier's prices.
	Flex *TierPrice `koanf:"flex"`
	// Batch is the prices of the provider's Batch API (TierBatch): each
	// price it leaves unset (0), and every price while it is nil, is half
	// the default tier's, OpenAI's and Anthropic's batch discount.
	Batch *TierPrice `koanf:"batch"`
}

// TierPrice is the prices of one service tier other than the default, in
// US dollars per million tokens, with Price's keys and meaning. A price of
// 0 (unset) is the default tier's same price, as the entry sets it; then
// the fallbacks of Price apply within the tier (cached input unset in both
// costs the tier's Input). Flex is cheaper than the default tier, so
// falling back to the default tier never under-counts.
type TierPrice struct {
	// Input is the tier's prices[].input (Price.Input).
	Input float64 `koanf:"input"`
	// CachedInput is the tier's prices[].cached_input (Price.CachedInput).
	CachedInput float64 `koanf:"cached_input"`
	// CacheWrite is the tier's prices[].cache_write (Price.CacheWrite).
	CacheWrite float64 `koanf:"cache_write"`
	// CacheRead is the tier's prices[].cache_read (Price.CacheRead).
	CacheRead float64 `koanf:"cache_read"`
	// Output is the tier's prices[].output (Price.Output).
	Output float64 `koanf:"output"`
}

// TierFlex is the service_tier, as a response names it, that Price.Flex
// prices; every other tier but TierBatch ("default", "auto", "priority",
// "standard", none) is priced at the default tier's prices, which
// under-counts OpenAI's priority tier (about twice the default).
const TierFlex = "flex"

// TierBatch is the tier of work done through a provider's Batch API, which
// Price.Batch prices: the proxy prices a batch's usage at it.
const TierBatch = "batch"

// batchDiscount is what a batch price left unset is of the default tier's
// same price: OpenAI's and Anthropic's Batch APIs charge half.
const batchDiscount = 0.5

// DefaultMaxOutput is Price.MaxOutput when unset: 4096 tokens, the output
// cap of most chat models until 2024 (gpt-4-turbo, gpt-4o before
// 2024-08, the Claude 3 family). Newer models generate more (gpt-4o
// 16,384, o-series 100,000, Claude Sonnet 4 64,000), so it is a guess: a
// request that sets no max_tokens may cost more than it reserves. Set
// max_output to the model's documented maximum and a budget errs only on
// the side that maximum states.
const DefaultMaxOutput = 4096

// maxPrice is the most a price may be, in USD per million tokens. The
// dearest published price is $600 (o1-pro's output, 2025), so 10,000
// leaves room for dearer models while refusing a price in the wrong unit
// (per billion tokens, or cents) or with a misplaced decimal point; and
// it bounds a rate at 1e13 nanodollars per million tokens, so that Cost
// sums exactly in 128 bits (cost.go).
const maxPrice = 10_000

// maxPricedTokens is the most tokens of one kind Cost and WorstCase
// count, 2^48: far above any real response (and usage.MaxTokens, the most
// the proxy reports), low enough that their 128-bit sums never overflow.
const maxPricedTokens = 1 << 48

// Table is the prices list, config key prices: first match wins (For).
type Table []Price

// For returns the first entry one of whose patterns matches model — an
// Azure deployment (deployment) regardless of case, a model field exactly
// — in place; nil when none does, or model is empty or longer than any
// pattern is worth matching against (glob.MaxName). A request keeps a
// pointer into the configuration of its admission, which no reload
// changes (a reload stores a new table), and For allocates nothing.
func (t Table) For(model string, deployment bool) *Price {
	match, ok := glob.Matcher(model, deployment)
	if !ok {
		return nil
	}
	for i := range t {
		if slices.ContainsFunc(t[i].Match, match) {
			return &t[i]
		}
	}
	return nil
}

// rates are one tier's prices as Cost charges them, in nanodollars per
// million tokens, every fallback applied: in [0, maxPrice·1e9].
type rates struct {
	input, cached, write, output uint64
	// audioIn and audioOut are the audio prices, the tier's input and
	// output when unset.
	audioIn, audioOut uint64
}

// Effective returns the prices Cost charges at tier (as the response
// names it), in USD per million tokens, every fallback applied: the flex
// prices at TierFlex, each unset one the default tier's; the batch prices
// at TierBatch, each unset one half the default tier's; CachedInput the
// price of a cache read in either word, or Input; CacheWrite, or Input.
// CacheRead is 0.
func (p Price) Effective(tier string) TierPrice {
	t := TierPrice{Input: p.Input, CachedInput: p.CachedInput, CacheWrite: p.CacheWrite, CacheRead: p.CacheRead, Output: p.Output}
	switch {
	case p.Flex != nil && strings.EqualFold(tier, TierFlex):
		t = p.Flex.over(t)
	case strings.EqualFold(tier, TierBatch):
		var b TierPrice
		if p.Batch != nil {
			b = *p.Batch
		}
		t = b.over(t.scaled(batchDiscount))
	}
	e := TierPrice{Input: t.Input, CachedInput: t.Input, CacheWrite: t.Input, Output: t.Output}
	if c := t.cached(); c > 0 {
		e.CachedInput = c
	}
	if t.CacheWrite > 0 {
		e.CacheWrite = t.CacheWrite
	}
	return e
}

// rates returns p's rates at tier: its Effective prices in nanodollars
// per million tokens.
func (p Price) rates(tier string) rates {
	e := p.Effective(tier)
	r := rates{input: rate(e.Input), cached: rate(e.CachedInput), write: rate(e.CacheWrite), output: rate(e.Output)}
	r.audioIn, r.audioOut = r.input, r.output
	if p.AudioInput > 0 {
		r.audioIn = rate(p.AudioInput)
	}
	if p.AudioOutput > 0 {
		r.audioOut = rate(p.AudioOutput)
	}
	return r
}

// cached is t's price of input read from the cache, in either word; 0
// when it sets none.
func (t TierPrice) cached() float64 {
	if t.CachedInput > 0 {
		return t.CachedInput
	}
	return t.CacheRead
}

// scaled returns t's prices times f.
func (t TierPrice) scaled(f float64) TierPrice {
	return TierPrice{Input: t.Input * f, CachedInput: t.CachedInput * f, CacheWrite: t.CacheWrite * f, CacheRead: t.CacheRead * f, Output: t.Output * f}
}

// over returns t's prices with each it leaves unset (0) taken from def,
// the default tier's as the entry sets them; cached input, in either
// word, is one price.
func (t TierPrice) over(def TierPrice) TierPrice {
	pick := func(own, fallback float64) float64 {
		if own > 0 {
			return own
		}
		return fallback
	}
	return TierPrice{Input: pick(t.Input, def.Input), CachedInput: pick(t.cached(), def.cached()),
		CacheWrite: pick(t.CacheWrite, def.CacheWrite), Output: pick(t.Output, def.Output)}
}

// rate converts a price in USD per million tokens to nanodollars per
// million tokens, rounded to the nearest, clamped to [0, maxPrice·1e9]:
// NaN and +Inf (an unvalidated price) to the most, so that Cost never
// fails, whatever its Price.
func rate(usd float64) uint64 {
	switch n := math.Round(usd * 1e9); {
	case n > 0 && n < maxPrice*1e9:
		return uint64(n)
	case n <= 0:
		return 0
	default: // too dear, +Inf or NaN
		return maxPrice * 1e9
	}
}

// OutputCap is a request's output cap (output, its max_tokens) as its
// budgets reserve it: at most p's max_output per answer it asks for
// (generations), when p sets max_output — the model generates no more,
// whatever max_tokens asks, and a request asking a million tokens of a
// model that stops at 16,384 must not hold the budget a million tokens
// would cost. A price without max_output bounds nothing: DefaultMaxOutput
// is a guess, below what newer models generate. 0 (no cap) stays 0, which
// WorstCase reads as maxOutput.
func (p Price) OutputCap(output, generations int64) int64 {
	if output <= 0 || p.MaxOutput <= 0 {
		return output
	}
	each, n := min(p.MaxOutput, maxPricedTokens), max(generations, 1)
	if n > maxPricedTokens/each {
		return output // past any count WorstCase prices: it saturates there
	}
	return min(output, n*each)
}

// InputLimit is the input a budget reserves for a request to model whose
// input is hidden: MaxInput, or DefaultMaxInput while it is 0.
func (p Price) InputLimit(model string, longContext bool) int64 {
	if p.MaxInput <= 0 {
		return DefaultMaxInput(model, longContext)
	}
	return min(p.MaxInput, maxPricedTokens)
}

// maxOutput is the output WorstCase reserves for a request that sets no
// max_tokens: MaxOutput, or DefaultMaxOutput while it is 0.
func (p Price) maxOutput() int64 {
	if p.MaxOutput <= 0 {
		return DefaultMaxOutput
	}
	return min(p.MaxOutput, maxPricedTokens)
}
