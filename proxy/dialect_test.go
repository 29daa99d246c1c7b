package proxy

import (
	"net/url"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// TestDialectOf: the provider family from the path and the upstream host.
func TestDialectOf(t *testing.T) {
	tests := []struct {
		upstream, path string
		want           dialect
	}{
		{"https://api.openai.com", "/v1/chat/completions", dialectOpenAI},
		{"https://API.OpenAI.com:443", "/v1/responses", dialectOpenAI},
		{"https://my-resource.openai.azure.com", "/v1/chat/completions", dialectAzure},
		{"https://gateway.internal", "/openai/deployments/gpt-4o/chat/completions", dialectAzure},
		{"https://api.anthropic.com", "/v1/messages", dialectAnthropic},
		{"https://gateway.internal", "/v1/messages", dialectAnthropic},
		{"http://vllm:8000", "/v1/chat/completions", dialectCompatible},
		{"https://api.groq.com/openai", "/v1/chat/completions", dialectCompatible},
		{"https://api.openai.com.evil.example", "/v1/chat/completions", dialectCompatible},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.upstream)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := routeOf(&url.URL{Path: tt.path})
		if err != nil {
			t.Fatal(err)
		}
		if got := newUpstreamDialect(ProviderAuto, u).of(rt); got != tt.want {
			t.Errorf("dialect of %s to %s = %s, want %s", tt.path, tt.upstream, got, tt.want)
		}
	}
}

// TestProviderOverrides: upstream.provider names the dialect of every
// request, whatever the path or host.
func TestProviderOverrides(t *testing.T) {
	rt, err := routeOf(&url.URL{Path: "/v1/chat/completions"})
	if err != nil {
		t.Fatal(err)
	}
	local := &url.URL{Scheme: "http", Host: "127.0.0.1:8081"}
	for p, want := range map[Provider]dialect{"openai": dialectOpenAI, "azure": dialectAzure, "anthropic": dialectAnthropic,
		"openai-compatible": dialectCompatible, ProviderAuto: dialectCompatible} {
		if got := newUpstreamDialect(p, local).of(rt); got != want {
			t.Errorf("upstream.provider %s: dialect %s, want %s", p, got, want)
		}
	}
	var p Provider
	if err := p.UnmarshalText([]byte("bedrock")); err == nil {
		t.Error("upstream.provider: bedrock accepted")
	}
}

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
