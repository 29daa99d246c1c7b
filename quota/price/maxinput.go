package price

import "strings"

// inputFamily is a model family's default max_input: the models whose
// names start with prefix (ASCII case folded, as an Azure deployment is
// matched) read at most tokens of input in one request.
type inputFamily struct {
	prefix string
	tokens int64
}

// inputFamilies are DefaultMaxInput's families, the first whose prefix
// starts a model name wins: each the context window of the family's
// largest model, input and output together, so that it covers the input
// of any one request to it.
var inputFamilies = [...]inputFamily{
	{"gpt-4.1", 1_047_576},                       // gpt-4.1, -mini, -nano
	{"gpt-5", 400_000},                           // gpt-5, -mini, -nano, -pro, -codex, gpt-5.1: 272,000 in + 128,000 out
	{"gpt-4o", 128_000}, {"chatgpt-4o", 128_000}, // gpt-4o, -mini, -audio, -search
	{"o1", 200_000}, {"o3", 200_000}, {"o4", 200_000}, // the o-series (o1-mini: 128,000)
	{"claude", 200_000}, // every Claude model, without the 1M-token context beta
}

// FallbackMaxInput is DefaultMaxInput for a model no family names (an
// Azure deployment's own name, a model meterproxy knows nothing of) and
// for a request that asks for a long context (Anthropic's context-1m
// beta): 2^20 = 1,048,576 tokens, above the largest context window the
// providers meterproxy fronts serve (gpt-4.1's 1,047,576 and Claude's
// 1,000,000 with that beta).
const FallbackMaxInput = 1 << 20

// DefaultMaxInput is Price.MaxInput when unset, for a request to model:
// its family's context window (inputFamilies), or FallbackMaxInput for a
// model of no family or when longContext (the request asked for a
// context beyond its family's default).
func DefaultMaxInput(model string, longContext bool) int64 {
	if longContext {
		return FallbackMaxInput
	}
	for _, f := range inputFamilies {
		if len(model) >= len(f.prefix) && strings.EqualFold(model[:len(f.prefix)], f.prefix) {
			return f.tokens
		}
	}
	return FallbackMaxInput
}
