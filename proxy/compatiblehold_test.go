package proxy

import (
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// TestHeldOnCompatibleHostsHeaders: the OpenAI-compatible hosts' own
// rate-limit words hold bulk as each provider means them (issue 36 item
// 3) — Together's requests and tokens a second, Fireworks' generated
// tokens and its over-limit flag, Mistral's tokens a minute, Groq's
// OpenAI-style names with fractional durations — and the same hosts
// reporting room hold nothing.
func TestHeldOnCompatibleHostsHeaders(t *testing.T) {
	tests := []struct {
		name string
		kv   []string
		hold bool
	}{
		{"together requests a second", []string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "0.5"}, true},
		{"together tokens a second", []string{"x-tokenlimit-limit", "20000", "x-tokenlimit-remaining", "100"}, true},
		{"together with room", []string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "x-tokenlimit-limit", "20000", "x-tokenlimit-remaining", "19000"}, false},
		{"fireworks generated tokens", []string{"x-ratelimit-limit-tokens-generated", "10000", "x-ratelimit-remaining-tokens-generated", "50"}, true},
		{"fireworks over its limit", []string{"x-ratelimit-limit-requests", "6000", "x-ratelimit-remaining-requests", "5999", "x-ratelimit-over-limit", "yes"}, true},
		{"fireworks over its limit alone", []string{"x-ratelimit-over-limit", "yes"}, true},
		{"fireworks with room", []string{"x-ratelimit-limit-tokens-prompt", "100000", "x-ratelimit-remaining-tokens-prompt", "99000", "x-ratelimit-over-limit", "no"}, false},
		{"mistral tokens a minute", []string{"x-ratelimitbysize-limit-minute", "500000", "x-ratelimitbysize-remaining-minute", "1000"}, true},
		{"mistral with room", []string{"x-ratelimitbysize-limit-minute", "500000", "x-ratelimitbysize-remaining-minute", "499000"}, false},
		{"groq fractional reset", []string{"x-ratelimit-limit-tokens", "18000", "x-ratelimit-remaining-tokens", "100", "x-ratelimit-reset-tokens", "2m59.56s"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := headersProxy(t, http.StatusOK, tt.kv, `{"id":"c","object":"chat.completion","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
			send := func() {
				t.Helper()
				if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`)); status != http.StatusOK {
					t.Fatalf("request: %d %s", status, b)
				}
			}
			send()
			if tt.hold { // the limiter hears of it with its next store call
				waitFor(t, "the upstream hold", func() bool { return p.admitter.State().UpstreamHoldSeconds > 0 })
				return
			}
			send() // the next request carries a hold to the limiter, were there one
			if hold := p.admitter.State().UpstreamHoldSeconds; hold != 0 {
				t.Errorf("upstream hold %vs, want none", hold)
			}
		})
	}
}

// headersProxy is a proxy holding its own key (its answers speak of this
// account: destination.spent) in front of an OpenAI upstream that
// answers every request status, with the headers kv (name, value, …) and
// body.
func headersProxy(t *testing.T, status int, kv []string, body string) *testProxy {
	return newTestProxy(t, proxyOpts{upstream: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Upstream.Provider = "openai"
		c.Upstream.APIKey = "sk-test"
	}})
}
