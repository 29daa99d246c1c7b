package proxy

import (
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"net/http"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
)

// Refill is upstream.refill: how the provider's buckets refill, which
// decides how long its rate-limit headers hold bulk (see
// ratelimit.Observation.BelowReserve).
type Refill string

// The upstream.refill values.
const (
	// RefillAuto takes each response's refill model from its dialect
	// (refillOf).
	RefillAuto Refill = "auto"
	// RefillContinuous and RefillWindow apply one model to every response.
	RefillContinuous = Refill(ratelimit.RefillContinuous)
	RefillWindow     = Refill(ratelimit.RefillWindow)
)

// refills are the upstream.refill values.
var refills = []Refill{RefillAuto, RefillContinuous, RefillWindow}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another model is refused at load, by key.
func (r *Refill) UnmarshalText(b []byte) error { return configcheck.SetOneOf(r, b, refills...) }

// refillOf is the refill model of a response with headers h from a
// provider of dialect d, under the operator's choice r. With auto:
//
//   - Anthropic: continuous. Its docs: "The API uses the token bucket
//     algorithm … your capacity is continuously replenished up to your
//     maximum limit", and a reset is "the time when the rate limit will be
//     fully replenished".
//   - OpenAI, and OpenAI-compatible servers that send its headers (Groq):
//     continuous. OpenAI documents the same token bucket, and
//     x-ratelimit-reset-* as the time until the limit "resets to its
//     initial state", i.e. is full.
//   - Azure OpenAI (or the x-rate-limit-* spelling only Azure sends):
//     window. Azure documents no continuous refill; it "evaluates the rate
//     of incoming requests over a small period of time, typically 1 or 10
//     seconds", so what a response reports comes back at its reset, and
//     its resets are short (10 s in its own example). Holding to the reset
//     costs at most that window and never sends requests Azure would
//     refuse; an operator who knows better sets upstream.refill:
//     continuous.
func refillOf(r Refill, d dialect, h http.Header) ratelimit.Refill {
	switch {
	case r == RefillContinuous || r == RefillWindow:
		return ratelimit.Refill(r)
	case d == dialectAzure || ratelimit.AzureSpelling(h):
		return ratelimit.RefillWindow
	default:
		return ratelimit.RefillContinuous
	}
}
