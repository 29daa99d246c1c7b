package proxy

import "github.com/meterproxy/meterproxy/proxy/usage"

// dialect is the provider whose accounting a request falls under: how its buckets refill
// (refillOf) and how it charges tokens (charge). It is resolved per request,
// once, from upstream.provider, the path family and the upstream's host
// (upstreamProvider.resolve).
type dialect uint8

const (
	// dialectCompatible is an OpenAI-compatible server other than OpenAI's
	// own (vLLM, Groq, a gateway): how it counts tokens is not documented.
	dialectCompatible dialect = iota
	// dialectOpenAI is api.openai.com.
	dialectOpenAI
	// dialectAzure is Azure OpenAI.
	dialectAzure
	// dialectAnthropic is Anthropic.
	dialectAnthropic
	// dialectGemini is Google's Gemini API, native or OpenAI-compatible.
	dialectGemini
)

var dialectNames = [...]string{"openai-compatible", "openai", "azure", "anthropic", "gemini"}

func (d dialect) String() string { return dialectNames[d] }

// charge is what the provider charges a request in tokens — handed to
// admission, which charges it where the request's pool enforces
// tokens_per_minute — and whether the charge is settled to the usage the
// response reports, as the dialect's provider counts it:
//
//   - OpenAI charges "the maximum of max_tokens and the estimated number of
//     tokens based on the character count of your request", at admission,
//     and gives nothing back when the response is short: so does
//     meterproxy (no settling). Settling down would admit more than the
//     provider accepts, and its bucket would drain.
//   - Azure OpenAI charges an estimate of the prompt plus max_tokens (times
//     best_of), "not the same as the token count used for billing", at
//     admission, and settles nothing either.
//   - Anthropic limits input tokens (ITPM, "estimated at the beginning of
//     each request, and the estimate is adjusted during the request") and
//     output tokens (OTPM, "evaluated in real time"; "max_tokens does not
//     factor" in) apart. A pool's tokens_per_minute is then its input
//     budget: the charge is the input estimate, settled to the input the
//     response reports. Output is charged after the fact to the pool's
//     output_tokens_per_minute (Lease.Spent, in modifyResponse),
//     and Anthropic's own anthropic-ratelimit-output-tokens-* headers
//     hold bulk below the reserve like any other bucket (see observe).
//   - Gemini's tokens-per-minute limit counts input tokens (its rate-limit
//     tables, ai.google.dev/gemini-api/docs/rate-limits, list it as "TPM
//     (input)"); no limit of its counts output. A pool's
//     tokens_per_minute is its input budget, charged as Anthropic's is:
//     the input estimate, settled to the input the response reports.
//   - Any other OpenAI-compatible server: the input estimate plus the most
//     output the request allows, settled to the reported usage (the
//     estimate is the safe side; the settling gives back what was not
//     used).
//
// "max_tokens" above is the request's output ceiling
// (usage.Request.OutputCeiling): the output cap, which bounds each
// generation, times the generations the provider makes — n choices, or
// best_of candidates for legacy completions (best_of ≥ n; the larger
// counts, never the product). OpenAI's cookbook counts a request as
// n × max_tokens the same way (api_request_parallel_processor.py). The
// arithmetic saturates at usage.MaxTokens: "max_tokens": 1e300 with
// "n": 128 is a large charge, never a wrapped one.
//
// input is the request's input estimate (usage.EstimateInput).
func (d dialect) charge(input int64, req usage.Request) (cost int64, settle settling) {
	out := req.OutputCeiling()
	switch d {
	case dialectOpenAI:
		return min(max(input, out), usage.MaxTokens), settleNone
	case dialectAzure:
		return usage.AddTokens(input, out), settleNone
	case dialectAnthropic, dialectGemini:
		return min(input, usage.MaxTokens), settleInput
	default:
		return usage.AddTokens(input, out), settleTotal
	}
}

// settling is what a charge is settled to when the response reports its
// usage.
type settling uint8

const (
	// settleNone keeps the admission charge: the provider gives nothing
	// back.
	settleNone settling = iota
	// settleTotal settles to input plus output.
	settleTotal
	// settleInput settles to the input alone: the budget is input tokens.
	settleInput
)

// of is the usage u settles a charge to.
func (s settling) of(u usage.Usage) int64 {
	if s == settleInput {
		return u.Input
	}
	return u.Total()
}
