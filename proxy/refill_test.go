package proxy

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
)

// TestRefillOf: each dialect's refill model under auto, and the operator's
// choice over any dialect.
func TestRefillOf(t *testing.T) {
	const C, W = ratelimit.RefillContinuous, ratelimit.RefillWindow
	tests := []struct {
		path          string
		azureSpelling bool
		mode          Refill
		want          ratelimit.Refill
	}{
		{"/v1/chat/completions", false, RefillAuto, C},                        // OpenAI and OpenAI-compatible
		{"/v1/messages", false, RefillAuto, C},                                // Anthropic
		{"/openai/deployments/gpt-4o/chat/completions", false, RefillAuto, W}, // Azure
		{"/openai/v1/chat/completions", false, RefillAuto, W},                 // Azure's v1 API
		{"/v1/chat/completions", true, RefillAuto, W},                         // Azure's x-rate-limit-* spelling
		{"/openai/deployments/gpt-4o/chat/completions", false, RefillContinuous, C},
		{"/v1/messages", false, RefillWindow, W},
		{"/openaix/v1/chat/completions", false, RefillAuto, C}, // not under /openai
	}
	for _, tt := range tests {
		rt, err := routeOf(&url.URL{Path: tt.path})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		if tt.azureSpelling {
			h.Set("X-Rate-Limit-Remaining-Tokens", "5")
		}
		d := newUpstreamProvider(ProviderAuto, &url.URL{Host: "upstream.example"}).resolve(rt).dialect
		if got := refillOf(tt.mode, d, h); got != tt.want {
			t.Errorf("refillOf(%s, %s, azure spelling %v) = %s, want %s", tt.mode, tt.path, tt.azureSpelling, got, tt.want)
		}
	}
}
