package fakeprovider

import (
	"math"
	"strings"
	"time"
)

// How each provider charges a request to its tokens-per-minute bucket, as
// their documentation says (and independently of meterproxy's own model):
//
//   - OpenAI: at admission, "the maximum of max_tokens and the estimated
//     number of tokens based on the character count of your request";
//     nothing comes back when the response is short.
//   - Azure OpenAI: at admission, the prompt plus max_tokens (times
//     best_of); nothing comes back either.
//   - Anthropic: input tokens estimated at admission; output tokens as they
//     are generated, max_tokens not counted — to a bucket of their own
//     (OTPM) with Config.OutputTPM, which refuses new requests once spent.
//   - Gemini: input tokens ("TPM (input)"), at admission.
//
// A model the account's tier has no quota for (ModelLimits.NoQuota) is
// refused every request, and charged nothing.
//
// Token counts here are a quarter of the body's bytes (promptTokens) for
// the prompt, and one per generated word.

// limit debits a's buckets for a request on a's path with body, at now
// (p.mu held): one request, and with EnforceTPM its token charge, taken
// only when the request bucket and, for Anthropic with an output bucket,
// the output bucket admit it. Without EnforceTPM the prompt is spent from
// a reported-only bucket.
func (p *Provider) limit(a *arrival, api api, path string, body []byte, now time.Time) {
	var f chargeFields
	_ = decodeLenient(body, &f) // a body that is not JSON: the account's limits, charged its prompt
	p.limitCharge(a, api, modelOf(path, f.Model), promptTokens(body), f, now)
}

// limitCharge is limit for a request for model with prompt tokens and the
// output fields f (p.mu held).
func (p *Provider) limitCharge(a *arrival, api api, model string, prompt int, f chargeFields, now time.Time) {
	lim := p.limitsFor(model)
	a.limits, a.model = lim, model
	if lim.noQuota {
		a.admitted, a.noQuota = false, true
		return
	}
	if p.cfg.Dialect == DialectFireworks && api == openAI {
		p.limitFireworks(a, lim, prompt, now)
		return
	}
	a.admitted, a.requests = lim.requests.admit(now)
	if api == anthropic && p.cfg.EnforceTPM {
		var ok bool
		ok, a.output = lim.output.positive(now)
		a.admitted = a.admitted && ok
	}
	if !p.cfg.EnforceTPM {
		a.tokens = lim.tokens.spend(now, prompt)
	} else if a.admitted {
		charge := admissionCharge(api, prompt, f)
		var ok bool
		ok, a.tokens = lim.tokens.take(now, charge)
		a.admitted = ok
		if ok {
			a.rec.TokensCharged = charge
		}
	} else {
		_, a.tokens = lim.tokens.take(now, 0)
	}
	if a.tokens.limit > 0 {
		a.rec.TokensRemaining = int(math.Floor(math.Max(lim.tokens.level, 0)))
	}
}

// limitsNow is the state of lim's request and token buckets at now, as a
// rate_limits.updated event reports them.
func (p *Provider) limitsNow(lim *limits, now time.Time) (requests, tokens limitState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim.requests.capacity > 0 {
		lim.requests.refill(now)
		requests = lim.requests.state(now)
	}
	if lim.tokens.capacity > 0 {
		lim.tokens.refill(now)
		tokens = lim.tokens.state(now)
	}
	return requests, tokens
}

// chargeOutput charges Anthropic's output tokens, n of them generated at
// now for a's request, when TPM is enforced: to the output bucket when
// there is one, else with the input to TPM; after admission, never
// refusing.
func (p *Provider) chargeOutput(a arrival, now time.Time, n int) {
	rec, lim := a.rec, a.limits
	if !p.cfg.EnforceTPM || lim == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim.output.capacity > 0 {
		lim.output.owe(now, n)
		rec.OutputCharged += n
		return
	}
	lim.tokens.spend(now, n)
	rec.TokensCharged += n
}

// modelOf is the model a request on path naming model in its body is
// for, as a provider keeps limits: an Azure deployment or a Gemini API
// path's model, else the body's.
func modelOf(path, model string) string {
	if m, _, ok := geminiPath(path); ok {
		return m
	}
	if rest, ok := strings.CutPrefix(path, "/openai/deployments/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	return model
}

// chargeFields are the request fields the limits read.
type chargeFields struct {
	Model               string `json:"model"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	MaxOutputTokens     int    `json:"max_output_tokens"`
	BestOf              int    `json:"best_of"`
}

// admissionCharge is what a request on a's path, of prompt tokens and
// fields f, costs the token bucket when it arrives.
func admissionCharge(a api, prompt int, f chargeFields) int {
	maxOut := max(f.MaxTokens, f.MaxCompletionTokens, f.MaxOutputTokens)
	switch a {
	case azure:
		return prompt + maxOut*max(1, f.BestOf)
	case anthropic, gemini, geminiOpenAI:
		return prompt
	default:
		return max(prompt, maxOut)
	}
}
