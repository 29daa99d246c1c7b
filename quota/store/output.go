package store

// outputBucket is a pool's output-token budget
// (account.output_tokens_per_minute): a token bucket refilled continuously
// at the budget's rate up to one minute's worth, and debited by the output
// tokens that responses report. Output is not known at admission (and
// Anthropic, whose OTPM limit this mirrors, does not count max_tokens
// against it), so it is charged after the fact, and the bucket may go into
// debt. Bulk is held while the bucket is below the interactive reserve,
// interactive while it is spent.
//
// The level is kept in units of 1/60,000 token, so a budget of tpm tokens
// a minute refills exactly tpm units a millisecond and every step is a
// whole number: take.lua's output phase is the same arithmetic, and the
// conformance suite holds the two equal. The zero value is full.
type outputBucket struct {
	level int64 // units; below zero is debt
	atMs  int64 // when level was brought up to date; 0 when never (full)
}

// outputUnit is how many of outputBucket's units make one token.
const outputUnit = 60000

// take brings b up to date at nowMs (Unix ms) for a budget of tpm tokens a
// minute, debits spent tokens (down to a minute's debt), and returns how
// many milliseconds from now bulk is held (the level is below reserve
// tokens) and interactive is held (nothing is left). A tpm of 0 is no
// budget: nothing is held, and the bucket starts full when one is set.
func (b *outputBucket) take(nowMs, spent, tpm, reserve int64) (bulkMs, interactiveMs int64) {
	if tpm <= 0 {
		*b = outputBucket{}
		return 0, 0
	}
	full := tpm * outputUnit
	switch {
	case b.atMs == 0:
		b.level = full
	case nowMs > b.atMs:
		// A minute refills it all; bounding the step keeps products exact.
		b.level = min(full, b.level+min(nowMs-b.atMs, outputUnit)*tpm)
	}
	b.atMs = max(b.atMs, nowMs)
	// The level is at most full and its debt at most full: spending more
	// than twice full changes nothing, and bounded so the product cannot
	// overflow (a response may report 2^48 tokens).
	b.level = max(b.level-min(spent, 2*tpm)*outputUnit, -full)
	if r := reserve * outputUnit; b.level < r {
		bulkMs = ceilDiv(r-b.level, tpm)
	}
	if b.level <= 0 {
		interactiveMs = ceilDiv(1-b.level, tpm)
	}
	return bulkMs, interactiveMs
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
