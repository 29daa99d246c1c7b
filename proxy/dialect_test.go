package proxy

import (
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// TestChargeByDialect: what admission charges and whether it is settled,
// as each provider counts tokens (see dialect.charge).
func TestChargeByDialect(t *testing.T) {
	const input = 50
	const none, total, inputOnly = settleNone, settleTotal, settleInput
	tests := []struct {
		d      dialect
		body   string
		cost   int64
		settle settling
	}{
		// OpenAI: the larger of max_tokens and the input estimate, never given back.
		{dialectOpenAI, `{"model":"m","max_tokens":1000}`, 1000, none},
		{dialectOpenAI, `{"model":"m","max_completion_tokens":20}`, input, none},
		{dialectOpenAI, `{"model":"m"}`, input, none},
		// Azure: the prompt plus max_tokens times best_of, never given back.
		{dialectAzure, `{"model":"m","max_tokens":1000}`, input + 1000, none},
		{dialectAzure, `{"prompt":"p","max_tokens":100,"best_of":3}`, input + 300, none},
		// Anthropic: the input budget, settled to the input; max_tokens does not count.
		{dialectAnthropic, `{"model":"c","max_tokens":4096}`, input, inputOnly},
		// Anything else: the estimate and the most output allowed, settled.
		{dialectCompatible, `{"model":"m","max_tokens":1000}`, input + 1000, total},
		{dialectCompatible, `not json`, input, total},
		// n choices each up to max_tokens (best_of candidates for legacy
		// completions; the larger counts).
		{dialectOpenAI, `{"model":"m","max_tokens":1000,"n":3}`, 3000, none},
		{dialectAzure, `{"prompt":"p","max_tokens":100,"best_of":3,"n":2}`, input + 300, none},
		{dialectCompatible, `{"model":"m","max_completion_tokens":10,"n":4}`, input + 40, total},
		{dialectAnthropic, `{"model":"c","max_tokens":4096,"n":4}`, input, inputOnly},
		// Numbers a hostile caller sends: the charge saturates, never wraps.
		{dialectAzure, `{"max_tokens":1e300,"best_of":1e300}`, usage.MaxTokens, none},
		{dialectOpenAI, `{"max_tokens":1e300,"n":128}`, usage.MaxTokens, none},
		{dialectCompatible, `{"max_tokens":281474976710656,"n":281474976710656}`, usage.MaxTokens, total},
		{dialectCompatible, `{"max_tokens":281474976710655,"n":2}`, usage.MaxTokens, total},
		{dialectCompatible, `{"max_tokens":-0,"n":-5}`, input, total},
		{dialectCompatible, `{"max_tokens":0.5}`, input + 1, total},
	}
	for _, tt := range tests {
		req, err := usage.ReadRequest("application/json", []byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		cost, settle := tt.d.charge(input, req)
		if cost != tt.cost || settle != tt.settle {
			t.Errorf("%s charge of %s = (%d, settling %d), want (%d, %d)", tt.d, tt.body, cost, settle, tt.cost, tt.settle)
		}
	}
}
