package price

import "math/bits"

// Usage is what one response used, as Price.Cost prices it. Counts
// are tokens; a negative count is 0 and a count above 2^48 is 2^48. The
// zero value costs nothing.
type Usage struct {
	// Input is every input token, the cache's included (as OpenAI's
	// prompt_tokens; Anthropic's input_tokens plus its cache reads and
	// writes).
	Input int64
	// CacheRead and CacheWrite are the parts of Input read from and
	// written to the prompt cache. Together they never exceed Input: the
	// cheaper part is cut first, reads then writes (cachedParts).
	CacheRead, CacheWrite int64
	// Output is every output token, reasoning tokens included.
	Output int64
	// AudioInput is the part of Input that is audio not read from or
	// written to the cache, AudioOutput the part of Output that is audio:
	// priced at the audio prices. Each is cut to the whole it is a part of.
	AudioInput, AudioOutput int64
	// Tier is the service_tier the response names (not the one the
	// request asked for): TierFlex is priced at the flex prices, anything
	// else at the default tier's.
	Tier string
}

// Cost is what u costs at p's prices: uncached input at Input (its audio
// at AudioInput), cache reads at the cached price, cache writes at
// CacheWrite, output at Output (its audio at AudioOutput), each at u's
// tier, rounded up to the nanodollar (never under-counted). It is exact
// below maxMoney, where it saturates, and never negative, whatever p and
// u hold (an unvalidated price is clamped to [0, 10,000] dollars per
// million tokens, NaN to the most).
func (p Price) Cost(u Usage) Nanodollars {
	r := p.rates(u.Tier)
	input, output := tokens(u.Input), tokens(u.Output)
	read, write := cachedParts(input, tokens(u.CacheRead), tokens(u.CacheWrite))
	uncached := input - read - write
	audioIn, audioOut := min(tokens(u.AudioInput), uncached), min(tokens(u.AudioOutput), output)
	var s sum
	s.add(uncached-audioIn, r.input)
	s.add(audioIn, r.audioIn)
	s.add(read, r.cached)
	s.add(write, r.write)
	s.add(output-audioOut, r.output)
	s.add(audioOut, r.audioOut)
	return s.nanodollars()
}

// WorstCase is the most a request of input tokens asking for at most
// output tokens could cost at p's prices at tier: every input token at the
// dearest price input may be charged (a cache write costs more than input
// on Anthropic, audio more than text), plus output at the dearer of
// Output and AudioOutput. output 0 (or less) means the request sets no
// cap: then p's max_output (4096 when unset). It never falls below Cost of
// the same counts at the same tier.
func (p Price) WorstCase(input, output int64, tier string) Nanodollars {
	r := p.rates(tier)
	if output <= 0 {
		output = p.maxOutput()
	}
	var s sum
	s.add(tokens(input), max(r.input, r.cached, r.write, r.audioIn))
	s.add(tokens(output), max(r.output, r.audioOut))
	return s.nanodollars()
}

// BatchWorst is the most m's requests could cost at p's batch prices:
// their input at the dearest input price, the caps they set and
// max_output for each that set none at the output price.
func (p Price) BatchWorst(m BatchModel) Nanodollars {
	each, uncapped := p.maxOutput(), int64(maxPricedTokens)
	if m.Uncapped <= maxPricedTokens/each {
		uncapped = max(m.Uncapped, 0) * each
	}
	out := sumTokens(m.Output, uncapped)
	if out == 0 {
		out = 1 // WorstCase reads 0 as "no cap": max_output, more than none
	}
	return p.WorstCase(m.Input, out, TierBatch)
}

// tokens is n within [0, maxPricedTokens].
func tokens(n int64) uint64 { return uint64(min(max(n, 0), maxPricedTokens)) }

// cachedParts returns the reads and writes of input tokens as Cost
// charges them: writes at most input, reads at most what is left, so
// that the parts never exceed the whole. Reads are cut first as the
// cheaper part, so a report whose parts do not add up is not priced
// below what it says.
func cachedParts(input, read, write uint64) (uint64, uint64) {
	write = min(write, input)
	return min(read, input-write), write
}

// sum is an exact sum of token counts times rates (nanodollars per
// million tokens), in 128 bits: each term is at most 2^48 · 1e13 < 2^92,
// so a few never overflow. The zero value is 0.
type sum struct{ hi, lo uint64 }

// add adds n tokens at rate.
func (s *sum) add(n, rate uint64) {
	hi, lo := bits.Mul64(n, rate)
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, lo, 0)
	s.hi += hi + carry
}

// perMillion divides a sum in nanodollars per million tokens × tokens
// down to nanodollars.
const perMillion = 1_000_000

// nanodollars is s / 1e6 rounded up, saturating at maxMoney.
func (s sum) nanodollars() Nanodollars {
	if s.hi >= perMillion { // the quotient needs more than 64 bits
		return maxMoney
	}
	q, rem := bits.Div64(s.hi, s.lo, perMillion)
	if q >= uint64(maxMoney) {
		return maxMoney
	}
	if rem > 0 {
		q++ // at most maxMoney
	}
	return Nanodollars(q)
}
