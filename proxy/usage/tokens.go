package usage

// MaxTokens is the most tokens any count the proxy computes may hold: a
// charge, a reported usage, a request's output ceiling. Far above any real
// one (2^48), and low enough that adding a few never overflows an int64.
const MaxTokens = maxCount

// AddTokens is a + b for token counts in [0, MaxTokens], saturating at
// MaxTokens; a negative operand counts as 0.
func AddTokens(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > MaxTokens-b {
		return MaxTokens
	}
	return a + b
}

// MulTokens is a × b for token counts in [0, MaxTokens] (a count times a
// number of generations), saturating at MaxTokens; a negative operand
// counts as 0.
func MulTokens(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a == 0 || b == 0 {
		return 0
	}
	if a > MaxTokens/b {
		return MaxTokens
	}
	return a * b
}
