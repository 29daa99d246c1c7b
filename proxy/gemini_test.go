package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// geminiProxy is a proxy with the key sk-gemini for a Gemini account
// (upstream.provider gemini) in front of up.
func geminiProxy(t *testing.T, up http.Handler, mutate func(*Config, *quota.Config)) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: up, mutate: func(c *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Upstream.Provider, c.Upstream.APIKey, c.Upstream.KeyForUnknownCallers = "gemini", "sk-gemini", true
		if mutate != nil {
			mutate(c, q)
		}
	}})
}

const geminiRequestBody = `{"contents":[{"role":"user","parts":[{"text":"count the sheep"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":7}}}`

// TestGeminiMetered: through the proxy, the fake provider's Gemini
// answers — generateContent plain, streamed as SSE and as a JSON array,
// under /v1beta and /v1, and the OpenAI-compatible chat completions — are
// metered at exactly the usage the fake reports (thoughts as output), not
// estimated, with the account's key in the header each API reads.
func TestGeminiMetered(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{StreamChunks: 3})
	p := geminiProxy(t, fake, nil)
	for _, tc := range []struct{ name, path, body string }{
		{"plain", "/v1beta/models/gemini-2.5-flash:generateContent", geminiRequestBody},
		{"v1", "/v1/models/gemini-2.5-flash:generateContent", geminiRequestBody},
		{"sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", geminiRequestBody},
		{"json array", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", geminiRequestBody},
		{"openai-compatible", "/v1beta/openai/chat/completions", `{"model":"gemini-2.0-flash","messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.Reset()
			in0 := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": "input", "estimated": "false"})
			out0 := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": "output", "estimated": "false"})
			if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+tc.path, tc.body)); status != http.StatusOK {
				t.Fatalf("%d %s", status, b)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Usage == nil {
				t.Fatalf("the fake saw %d requests: %+v", len(reqs), reqs)
			}
			h, u := reqs[0].Header, reqs[0].Usage
			if strings.HasPrefix(tc.path, "/v1beta/openai/") {
				if h.Get("Authorization") != "Bearer sk-gemini" || h.Get("X-Goog-Api-Key") != "" {
					t.Errorf("the fake saw Authorization %q, x-goog-api-key %q", h.Get("Authorization"), h.Get("X-Goog-Api-Key"))
				}
			} else if h.Get("X-Goog-Api-Key") != "sk-gemini" || h.Get("Authorization") != "" {
				t.Errorf("the fake saw x-goog-api-key %q, Authorization %q", h.Get("X-Goog-Api-Key"), h.Get("Authorization"))
			}
			in := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": "input", "estimated": "false"}) - in0
			out := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": "output", "estimated": "false"}) - out0
			if in != float64(u.InputTokens) || out != float64(u.OutputTokens) || in == 0 || out == 0 {
				t.Errorf("metered %v in, %v out; the fake reports %+v", in, out, *u)
			}
		})
	}
}

// TestGeminiQueryKey: a caller's ?key= is a credential like any other:
// moved to x-goog-api-key, never forwarded in the URL (with the proxy's
// key in its place, or the caller's own passed through), the rest of the
// query kept; beside a different x-goog-api-key it conflicts. It is never
// logged.
func TestGeminiQueryKey(t *testing.T) {
	type echoed struct{ Query, GoogKey, Auth string }
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echoed{r.URL.RawQuery, r.Header.Get("X-Goog-Api-Key"), r.Header.Get("Authorization")})
	})
	const callerKey = "AIzaCallerKey0123456789"
	for _, tc := range []struct {
		name   string
		ownKey bool
		want   echoed
	}{
		{"the proxy's key", true, echoed{Query: "alt=sse", GoogKey: "sk-gemini"}},
		{"passed through", false, echoed{Query: "alt=sse", GoogKey: callerKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProxy(t, proxyOpts{upstream: echo, mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
				c.Upstream.Provider = "gemini"
				if tc.ownKey {
					c.Upstream.APIKey, c.Upstream.KeyForUnknownCallers = "sk-gemini", true
				}
			}})
			status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse&key="+callerKey, geminiRequestBody))
			var got echoed
			if err := json.Unmarshal(b, &got); err != nil || status != http.StatusOK || got != tc.want {
				t.Errorf("the upstream saw %+v (%d %s), want %+v", got, status, b, tc.want)
			}
			req := newRequest(t, http.MethodPost, p.URL+"/v1beta/models/gemini-2.0-flash:generateContent?key="+callerKey, geminiRequestBody)
			req.Header.Set("X-Goog-Api-Key", "another-key")
			status, _, b = do(t, req)
			if e := googleErrorOf(t, b); status != http.StatusBadRequest || e.Error.Status != "INVALID_ARGUMENT" || e.reason() != reasonConflictingCredentials {
				t.Errorf("a query key beside another header key: %d %s", status, b)
			}
			if strings.Contains(p.logs.String(), callerKey) {
				t.Error("the caller's query key is in the logs")
			}
		})
	}
}

// googleErrorOf decodes a Google error body, failing t when it is not one.
func googleErrorOf(t *testing.T, b []byte) googleError {
	t.Helper()
	var e googleError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == 0 || e.Error.Message == "" || e.Error.Status == "" {
		t.Errorf("not a Google error: %s", b)
	}
	return e
}

// reason is the refusal reason e's ErrorInfo names.
func (e googleError) reason() string {
	for _, d := range e.Error.Details {
		if strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") {
			return d.Reason
		}
	}
	return ""
}

// TestGeminiRetryInfoHolds: Gemini's 429 sends no header; its
// RetryInfo's retryDelay holds bulk as a Retry-After would, and the 429
// is passed on as Google sent it. A 429 whose quota is 0 holds nothing
// and is answered no_quota_for_model in the API's shape, naming the
// model: Google's on the native API, OpenAI's on the compatible one.
func TestGeminiRetryInfoHolds(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Models: []fakeprovider.ModelLimits{{Name: "gemini-2.5-pro", NoQuota: true}}})
	p := geminiProxy(t, fake, nil)
	noQuota := []struct {
		path, body string
		check      func(t *testing.T, b []byte)
	}{
		{"/v1beta/models/gemini-2.5-pro:generateContent", geminiRequestBody, func(t *testing.T, b []byte) {
			if e := googleErrorOf(t, b); e.Error.Status != "RESOURCE_EXHAUSTED" || e.reason() != reasonNoQuotaForModel {
				t.Errorf("not Google's no_quota_for_model: %s", b)
			}
		}},
		{"/v1beta/openai/chat/completions", `{"model":"gemini-2.5-pro","messages":[]}`, openAIShape("insufficient_quota", reasonNoQuotaForModel)},
	}
	for _, tc := range noQuota {
		status, h, b := do(t, newRequest(t, http.MethodPost, p.URL+tc.path, tc.body))
		if status != http.StatusTooManyRequests || !strings.Contains(string(b), `gemini-2.5-pro`) || h.Get("Retry-After") != "" || h.Get("X-Should-Retry") != "false" {
			t.Errorf("%s without quota: %d %v %s", tc.path, status, h, b)
		}
		tc.check(t, b)
	}
	if got := counterValue(t, p.reg, "meterproxy_refusals_total", map[string]string{"reason": reasonNoQuotaForModel}); got != 2 {
		t.Errorf("meterproxy_refusals_total{reason=no_quota_for_model} = %v, want 2", got)
	}
	if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1beta/models/gemini-2.5-flash:generateContent", geminiRequestBody)); status != http.StatusOK {
		t.Fatalf("the next request: %d %s", status, b) // it carries the no-quota answers' hold to the limiter, were there one
	}
	if hold := p.admitter.State().UpstreamHoldSeconds; hold != 0 {
		t.Errorf("after the answers without quota: upstream hold %vs, want none", hold)
	}
	for _, tc := range []struct {
		name, path, body string
		provider         Provider
	}{
		{"native", "/v1beta/models/gemini-2.0-flash:generateContent", geminiRequestBody, "gemini"},
		{"openai-compatible", "/v1beta/openai/chat/completions", `{"model":"gemini-2.0-flash","messages":[]}`, "gemini"},
		{"through a gateway", "/v1beta/models/gemini-2.0-flash:generateContent", geminiRequestBody, "openai-compatible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeprovider.New(fakeprovider.Config{Models: []fakeprovider.ModelLimits{{Name: "gemini-2.0-flash", RPM: 1}}})
			p := geminiProxy(t, fake, func(c *Config, _ *quota.Config) { c.Upstream.Provider = tc.provider })
			if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+tc.path, tc.body)); status != http.StatusOK {
				t.Fatalf("the first request: %d %s", status, b)
			}
			status, h, b := do(t, newRequest(t, http.MethodPost, p.URL+tc.path, tc.body))
			if status != http.StatusTooManyRequests || h.Get("Retry-After") != "" || !strings.Contains(string(b), "google.rpc.RetryInfo") ||
				strings.Contains(string(b), "meterproxy") {
				t.Fatalf("the second request: %d %v %s, want Google's 429 passed on as sent", status, h, b)
			}
			waitFor(t, "the hold RetryInfo asks for", func() bool { return p.admitter.State().UpstreamHoldSeconds > 1 })
		})
	}
}
