package price

import (
	"math"
	"testing"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// TestPriceCost prices usage at issue 25's entries, each case worked by
// hand: tokens × USD per million × 1000 = nanodollars.
func TestPriceCost(t *testing.T) {
	p := issuePrices()
	gpt4o, sonnet := p[1], p[2]
	tiny := Price{Match: []string{"tiny"}, Input: 0.0001} // a tenth of a nanodollar a token
	realtime := Price{Match: []string{"gpt-realtime"}, Input: 4, CachedInput: 0.4, Output: 16, AudioInput: 32, AudioOutput: 64}
	dear := Price{Match: []string{"dear"}, Input: maxPrice, Output: maxPrice}
	tests := []struct {
		name  string
		price Price
		usage Usage
		want  Nanodollars
	}{
		// 600 uncached × 2.50 = 1,500,000; 400 cached × 1.25 = 500,000;
		// 500 out × 10.00 = 5,000,000: $0.007.
		{"gpt-4o, default tier", gpt4o, Usage{Input: 1000, CacheRead: 400, Output: 500}, 7_000_000},
		// The tier the response names: 600 × 1.25 = 750,000; 400 × 0.625
		// = 250,000; 500 × 5.00 = 2,500,000: half, $0.0035.
		{"gpt-4o, flex", gpt4o, Usage{Input: 1000, CacheRead: 400, Output: 500, Tier: "flex"}, 3_500_000},
		{"gpt-4o, FLEX", gpt4o, Usage{Input: 1000, CacheRead: 400, Output: 500, Tier: "FLEX"}, 3_500_000},
		// Any other tier is the default's.
		{"gpt-4o, priority", gpt4o, Usage{Input: 1000, CacheRead: 400, Output: 500, Tier: "priority"}, 7_000_000},
		{"gpt-4o, default", gpt4o, Usage{Input: 1000, CacheRead: 400, Output: 500, Tier: "default"}, 7_000_000},
		// cache_write unset is the input price: 1000 written × 2.50 =
		// 2,500,000; at flex the flex input, 1.25: 1,250,000.
		{"gpt-4o, cache writes at input", gpt4o, Usage{Input: 1000, CacheWrite: 1000}, 2_500_000},
		{"gpt-4o, flex cache writes at flex input", gpt4o, Usage{Input: 1000, CacheWrite: 1000, Tier: "flex"}, 1_250_000},
		// Reasoning tokens are inside Output: 2000 × 10.00 = 20,000,000.
		{"gpt-4o, output only", gpt4o, Usage{Output: 2000}, 20_000_000},
		// Anthropic: 100 after the breakpoint, 2000 written, 10000 read:
		// Input 12,100. 100 × 3.00 = 300,000; 2000 × 3.75 = 7,500,000;
		// 10,000 × 0.30 = 3,000,000; 300 out × 15.00 = 4,500,000: $0.0153.
		{"sonnet, cache write and read", sonnet, Usage{Input: 12_100, CacheRead: 10_000, CacheWrite: 2000, Output: 300}, 15_300_000},
		// No flex block: flex is priced at the default tier.
		{"sonnet, flex without a flex block", sonnet, Usage{Input: 12_100, CacheRead: 10_000, CacheWrite: 2000, Output: 300, Tier: "flex"}, 15_300_000},
		// Parts above the whole: writes kept (80 × 3.75 = 300,000), reads
		// cut to the 20 left (× 0.30 = 6,000), no uncached input.
		{"sonnet, parts clamped", sonnet, Usage{Input: 100, CacheRead: 50, CacheWrite: 80}, 306_000},
		{"sonnet, parts without input", sonnet, Usage{CacheRead: 50, CacheWrite: 80}, 0},
		{"negative counts", sonnet, Usage{Input: -5, CacheRead: -1, CacheWrite: -1, Output: -1}, 0},
		// 1 token × 0.0001 = 0.1 nanodollar, rounded up; 25 tokens 2.5,
		// up to 3.
		{"rounded up", tiny, Usage{Input: 1}, 1},
		{"rounded up, 2.5", tiny, Usage{Input: 25}, 3},
		{"exact", tiny, Usage{Input: 30}, 3},
		// 2^48 tokens × 10,000 × 1000 = 2.8e21 nanodollars: saturated.
		{"saturates", dear, Usage{Input: 1 << 48, Output: 1 << 48}, maxMoney},
		{"counts above 2^48", dear, Usage{Input: math.MaxInt64, Output: math.MaxInt64}, maxMoney},
		// 2^40 tokens × 10,000 × 1000 = 1.0995e19: above maxMoney too.
		{"2^40 at the dearest", dear, Usage{Output: 1 << 40}, maxMoney},
		// 2^30 × 10,000 × 1000 = 10,737,418,240,000,000: exact.
		{"2^30 at the dearest", dear, Usage{Output: 1 << 30}, 10_737_418_240_000_000},
		{"nothing", gpt4o, Usage{}, 0},
		// gpt-realtime: text $4 in, $0.40 cached, $16 out; audio $32 in,
		// $64 out. 1000 in (200 cached, 300 of the rest audio): 500 ×
		// 4.00 = 2,000,000 + 300 × 32.00 = 9,600,000 + 200 × 0.40 =
		// 80,000; 100 out (80 audio): 20 × 16.00 = 320,000 + 80 × 64.00 =
		// 5,120,000: $0.01712.
		{"realtime audio", realtime, Usage{Input: 1000, CacheRead: 200, AudioInput: 300, Output: 100, AudioOutput: 80}, 17_120_000},
		// Audio parts above their wholes are cut to them: 800 uncached
		// audio × 32.00 = 25,600,000 + 80,000 cached; 100 audio out ×
		// 64.00 = 6,400,000.
		{"realtime audio clamped", realtime, Usage{Input: 1000, CacheRead: 200, AudioInput: 5000, Output: 100, AudioOutput: 500}, 32_080_000},
		// Without audio prices, audio costs the text prices.
		{"audio at text prices", gpt4o, Usage{Input: 1000, CacheRead: 400, AudioInput: 300, Output: 500, AudioOutput: 100}, 7_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.price.Cost(tt.usage)
			if got != tt.want {
				t.Errorf("Cost(%+v) = %d (%s), want %d (%s)", tt.usage, got, got, tt.want, tt.want)
			}
			if worst := tt.price.WorstCase(tt.usage.Input, tt.usage.Output, tt.usage.Tier); got > worst {
				t.Errorf("Cost %d above WorstCase %d", got, worst)
			}
		})
	}
}

// TestPriceWorstCase: input at the dearest input-side price, output at the
// output price, max_output (4096 unset) when the request sets no cap.
func TestPriceWorstCase(t *testing.T) {
	p := issuePrices()
	gpt4o, sonnet := p[1], p[2]
	capped := sonnet
	capped.MaxOutput = 64_000
	tests := []struct {
		name          string
		price         Price
		input, output int64
		tier          string
		want          Nanodollars
	}{
		// 1000 × 2.50 (input, the dearest of 2.50, 1.25, 2.50) = 2,500,000
		// + 500 × 10.00 = 5,000,000.
		{"gpt-4o", gpt4o, 1000, 500, "", 7_500_000},
		// 1000 × 1.25 = 1,250,000 + 500 × 5.00 = 2,500,000.
		{"gpt-4o at flex", gpt4o, 1000, 500, "flex", 3_750_000},
		// No cap: 4096 × 10.00 = 40,960,000 + 2,500,000.
		{"gpt-4o, no max_tokens", gpt4o, 1000, 0, "", 43_460_000},
		{"gpt-4o, negative max_tokens", gpt4o, 1000, -7, "", 43_460_000},
		// Input at cache_write, the dearest: 12,100 × 3.75 = 45,375,000 +
		// 300 × 15.00 = 4,500,000.
		{"sonnet", sonnet, 12_100, 300, "", 49_875_000},
		// No cap, max_output 64,000: 64,000 × 15.00 = 960,000,000 +
		// 1000 × 3.75 = 3,750,000.
		{"sonnet, max_output", capped, 1000, 0, "", 963_750_000},
		{"saturates", sonnet, math.MaxInt64, math.MaxInt64, "", maxMoney},
		// Audio dearer than text: 1000 × 32.00 + 100 × 64.00.
		{"realtime, audio prices", Price{Input: 4, Output: 16, AudioInput: 32, AudioOutput: 64}, 1000, 100, "", 38_400_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.price.WorstCase(tt.input, tt.output, tt.tier); got != tt.want {
				t.Errorf("WorstCase(%d, %d, %q) = %d (%s), want %d (%s)", tt.input, tt.output, tt.tier, got, got, tt.want, tt.want)
			}
		})
	}
}

// TestFlexFallbacks: an unset flex price is the default tier's as the
// entry sets it, and then the tier's own fallbacks apply.
func TestFlexFallbacks(t *testing.T) {
	const flex = "flex"
	tests := []struct {
		name  string
		price Price
		want  rates // nanodollars per million tokens
	}{
		{"flex sets input only: output the default's; cached and writes the flex input",
			Price{Input: 2, Output: 8, Flex: &TierPrice{Input: 1}}, rates{input: 1e9, cached: 1e9, write: 1e9, output: 8e9, audioIn: 1e9, audioOut: 8e9}},
		{"the default's cache prices carry into flex",
			Price{Input: 3, CacheRead: 0.3, CacheWrite: 3.75, Output: 15, Flex: &TierPrice{Input: 1.5, Output: 7.5}},
			rates{input: 1.5e9, cached: 0.3e9, write: 3.75e9, output: 7.5e9, audioIn: 1.5e9, audioOut: 7.5e9}},
		{"flex's cached price in either word",
			Price{Input: 2, CachedInput: 1, Flex: &TierPrice{CacheRead: 0.5}}, rates{input: 2e9, cached: 0.5e9, write: 2e9, audioIn: 2e9}},
		{"an empty flex block is the default tier",
			Price{Input: 2, CachedInput: 1, Output: 8, Flex: &TierPrice{}}, rates{input: 2e9, cached: 1e9, write: 2e9, output: 8e9, audioIn: 2e9, audioOut: 8e9}},
	}
	for _, tt := range tests {
		if got := tt.price.rates(flex); got != tt.want {
			t.Errorf("%s: rates = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// FuzzPriceCost: whatever the prices (NaN, ±Inf, negatives, too dear:
// refused or not) and the usage, Cost and WorstCase are in [0, maxMoney]
// and never panic; for prices validation accepts, Cost is at most
// WorstCase of the same counts and tier, never decreases when a count
// grows (input, output, or cache reads or writes with the input they are
// part of), and its integer arithmetic agrees with floating point.
func FuzzPriceCost(f *testing.F) {
	f.Add(2.50, 1.25, 0.0, 0.0, 10.00, true, 1.25, 0.625, 0.0, 0.0, 5.00, int64(0), int64(1000), int64(400), int64(0), int64(500), int64(7), true)
	f.Add(3.00, 0.0, 3.75, 0.30, 15.00, false, 0.0, 0.0, 0.0, 0.0, 0.0, int64(64000), int64(12100), int64(10000), int64(2000), int64(300), int64(1), false)
	f.Add(math.NaN(), math.Inf(1), -1.0, 0.3, 1e300, true, math.Inf(-1), math.Copysign(0, -1), math.NaN(), 1.0, 2.0, int64(-1), int64(-5), int64(1<<62), int64(math.MaxInt64), int64(-1), int64(1<<48), true)
	f.Add(10000.0, 10000.0, 10000.0, 0.0, 10000.0, true, 10000.0, 0.0, 10000.0, 10000.0, 10000.0, int64(1<<48), int64(1<<48), int64(1<<47), int64(1<<47), int64(1<<48), int64(1<<40), true)
	f.Fuzz(func(t *testing.T, in, cached, write, read, out float64, hasFlex bool, fin, fcached, fwrite, fread, fout float64,
		maxOutput, input, cacheRead, cacheWrite, output, more int64, flexTier bool) {
		p := Price{Match: []string{"m"}, Input: in, CachedInput: cached, CacheWrite: write, CacheRead: read, Output: out, MaxOutput: maxOutput}
		if hasFlex {
			p.Flex = &TierPrice{Input: fin, CachedInput: fcached, CacheWrite: fwrite, CacheRead: fread, Output: fout}
		}
		u := Usage{Input: input, CacheRead: cacheRead, CacheWrite: cacheWrite, Output: output}
		if !hasFlex { // the flex prices' arguments price audio instead
			p.AudioInput, p.AudioOutput = fin, fout
			u.AudioInput, u.AudioOutput = more, maxOutput
		}
		if flexTier {
			u.Tier = TierFlex
		}
		cost, worst := p.Cost(u), p.WorstCase(u.Input, u.Output, u.Tier)
		if cost < 0 || cost > maxMoney || worst < 0 || worst > maxMoney {
			t.Fatalf("Cost %d, WorstCase %d: out of [0, %d]", cost, worst, maxMoney)
		}
		var problems configcheck.Problems
		Table{p}.Validate(problems.Add)
		if problems.Err() != nil {
			return
		}
		if cost > worst {
			t.Fatalf("Cost(%+v) = %d above WorstCase %d", u, cost, worst)
		}
		d := min(max(more, 0), maxPricedTokens)
		grown := []Usage{u, u, u, u}
		grown[0].Input = addTokens(u.Input, d)
		grown[1].Output = addTokens(u.Output, d)
		if consistent(u) {
			grown[2].Input, grown[2].CacheRead = addTokens(u.Input, d), addTokens(u.CacheRead, d)
			grown[3].Input, grown[3].CacheWrite = addTokens(u.Input, d), addTokens(u.CacheWrite, d)
		}
		for i, g := range grown {
			if c := p.Cost(g); c < cost {
				t.Fatalf("grown usage %d, %+v, costs %d, less than %+v at %d", i, g, c, u, cost)
			}
		}
		checkArithmetic(t, p, u, cost)
	})
}

// addTokens is a + d within [0, maxPricedTokens], for counts in that
// range.
func addTokens(a, d int64) int64 { return min(max(a, 0)+d, maxPricedTokens) }

// consistent reports whether u's counts are within [0, maxPricedTokens]
// and its cached parts within its input: usage as a provider reports it.
// Cost grows with cache reads or writes added to such usage (and to its
// input); with parts that exceed the whole, the cut falls elsewhere.
func consistent(u Usage) bool {
	in := func(n int64) bool { return n >= 0 && n <= maxPricedTokens }
	return in(u.Input) && in(u.CacheRead) && in(u.CacheWrite) && in(u.Output) && u.CacheRead+u.CacheWrite <= u.Input
}

// checkArithmetic holds Cost's 128-bit integer arithmetic to the same
// sum in floating point: Σ tokens × rate / 1e6 nanodollars, to within the
// round-up and float error, unless it saturates.
func checkArithmetic(t *testing.T, p Price, u Usage, cost Nanodollars) {
	t.Helper()
	r := p.rates(u.Tier)
	input, output := tokens(u.Input), tokens(u.Output)
	read, write := cachedParts(input, tokens(u.CacheRead), tokens(u.CacheWrite))
	audioIn, audioOut := min(tokens(u.AudioInput), input-read-write), min(tokens(u.AudioOutput), output)
	var want float64
	for _, part := range []struct{ n, rate uint64 }{{input - read - write - audioIn, r.input}, {audioIn, r.audioIn}, {read, r.cached}, {write, r.write},
		{output - audioOut, r.output}, {audioOut, r.audioOut}} {
		want += float64(part.n) * float64(part.rate) / 1e6
	}
	if want >= float64(maxMoney)*0.99 {
		return // saturates, or may
	}
	if diff := float64(cost) - want; diff < -want*1e-12 || diff > 1+want*1e-12 {
		t.Fatalf("Cost(%+v) = %d, the arithmetic gives %.3f", u, cost, want)
	}
}

// TestBatchTier: the batch tier is half the default tier's prices, each
// price a batch block sets replacing its half; a service tier named
// batch in any case is the batch tier.
func TestBatchTier(t *testing.T) {
	tests := []struct {
		name  string
		price Price
		tier  string
		want  rates // nanodollars per million tokens
	}{
		{"no batch block: half of every price",
			Price{Input: 3, CacheRead: 0.3, CacheWrite: 3.75, Output: 15}, TierBatch,
			rates{input: 1.5e9, cached: 0.15e9, write: 1.875e9, output: 7.5e9, audioIn: 1.5e9, audioOut: 7.5e9}},
		{"cached input unset: half the input",
			Price{Input: 2, Output: 8}, "BATCH", rates{input: 1e9, cached: 1e9, write: 1e9, output: 4e9, audioIn: 1e9, audioOut: 4e9}},
		{"a batch block's prices win; the rest half the default's",
			Price{Input: 2, CachedInput: 1, Output: 8, Batch: &TierPrice{Output: 5}}, TierBatch,
			rates{input: 1e9, cached: 0.5e9, write: 1e9, output: 5e9, audioIn: 1e9, audioOut: 5e9}},
		{"the default tier is untouched",
			Price{Input: 2, Output: 8, Batch: &TierPrice{Input: 0.1}}, "", rates{input: 2e9, cached: 2e9, write: 2e9, output: 8e9, audioIn: 2e9, audioOut: 8e9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.price.rates(tt.tier); got != tt.want {
				t.Errorf("rates(%q) = %+v, want %+v", tt.tier, got, tt.want)
			}
		})
	}
}
