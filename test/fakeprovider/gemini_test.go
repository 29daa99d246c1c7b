package fakeprovider_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":9}}}`

// TestGeminiGenerateContent: every way the fake answers generateContent
// reports the same usage, exactly, as the proxy's own Gemini reader reads
// it: plain, streamed as server-sent events and as a JSON array, under
// /v1beta and /v1; a cached part when asked for.
func TestGeminiGenerateContent(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{StreamChunks: 3})
	in := promptTokens(geminiBody)
	words := len(strings.Fields(reply1))
	want := usage.Usage{Input: int64(in), Output: int64(words + 9), Reasoning: 9, Model: "gemini-2.5-flash"}
	for _, tc := range []struct {
		name, path, contentType string
	}{
		{"plain", "/v1beta/models/gemini-2.5-flash:generateContent", "application/json"},
		{"v1", "/v1/models/gemini-2.5-flash:generateContent", "application/json"},
		{"sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "text/event-stream"},
		{"json array", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, b := send(t, srv, http.MethodPost, tc.path, geminiBody, map[string]string{"X-Goog-Api-Key": "k"})
			if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), tc.contentType) {
				t.Fatalf("status %d, Content-Type %q: %s", status, h.Get("Content-Type"), b)
			}
			for name := range h {
				if strings.Contains(strings.ToLower(name), "ratelimit") || strings.EqualFold(name, "Retry-After") {
					t.Errorf("Gemini sends no rate-limit headers; got %s", name)
				}
			}
			m := usage.NewMeter(usage.GenerateContent, h.Get("Content-Type"), 1)
			_, _ = m.Write(b)
			if got := m.Finish(true); got != want {
				t.Errorf("metered %+v, want %+v\n%s", got, want, b)
			}
			if tc.name == "json array" && (!json.Valid(b) || b[0] != '[') {
				t.Errorf("not a JSON array: %s", b)
			}
		})
	}
	t.Run("cached", func(t *testing.T) {
		_, h, b := send(t, srv, http.MethodPost, "/v1beta/models/gemini-2.5-flash:generateContent", geminiBody,
			map[string]string{fakeprovider.HeaderCachedTokens: "3"})
		m := usage.NewMeter(usage.GenerateContent, h.Get("Content-Type"), 1)
		_, _ = m.Write(b)
		if got := m.Finish(true); got.CacheRead != 3 || got.Input != int64(in) {
			t.Errorf("metered %+v, want 3 of %d input cached", got, in)
		}
	})
}

// TestGeminiOtherMethods: countTokens, the embeddings and the
// OpenAI-compatible endpoint answer; an unknown method is Google's 404.
func TestGeminiOtherMethods(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{})
	if status, _, b := post(t, srv, "/v1beta/models/gemini-2.0-flash:countTokens", geminiBody); status != http.StatusOK ||
		decode[map[string]int](t, b)["totalTokens"] != promptTokens(geminiBody) {
		t.Errorf("countTokens: %d %s", status, b)
	}
	if status, _, b := post(t, srv, "/v1beta/models/gemini-embedding-001:embedContent", `{"content":{"parts":[{"text":"x"}]}}`); status != http.StatusOK ||
		!strings.Contains(string(b), `"embedding":{"values":[`) {
		t.Errorf("embedContent: %d %s", status, b)
	}
	if status, _, b := post(t, srv, "/v1beta/models/gemini-embedding-001:batchEmbedContents", `{"requests":[{},{}]}`); status != http.StatusOK ||
		strings.Count(string(b), `"values"`) != 2 {
		t.Errorf("batchEmbedContents: %d %s", status, b)
	}
	chat := `{"model":"gemini-2.0-flash","messages":[{"role":"user","content":"hi"}]}`
	status, h, b := send(t, srv, http.MethodPost, "/v1beta/openai/chat/completions", chat, map[string]string{"Authorization": "Bearer k"})
	m := usage.NewMeter(usage.ChatCompletions, h.Get("Content-Type"), 1)
	_, _ = m.Write(b)
	if got := m.Finish(true); status != http.StatusOK || got.Input != int64(promptTokens(chat)) || got.Output == 0 || got.Estimated {
		t.Errorf("OpenAI-compatible chat: %d, metered %+v: %s", status, got, b)
	}
	status, _, b = post(t, srv, "/v1beta/models/gemini-2.0-flash:predictLongRunning", geminiBody)
	if e := decode[map[string]map[string]any](t, b)["error"]; status != http.StatusNotFound || e["status"] != "NOT_FOUND" {
		t.Errorf("an unknown method: %d %s", status, b)
	}
	if got := p.Stats().ByPath["/v1beta/models/gemini-2.0-flash:countTokens"]; got != 1 {
		t.Errorf("ByPath counted countTokens %d times", got)
	}
}

// TestGeminiRateLimit: the rate limit answers Gemini's RESOURCE_EXHAUSTED,
// which ratelimit.ParseGoogleError reads — its retry delay when the
// bucket refills, its quota — without any rate-limit header; on the
// OpenAI-compatible endpoint in a JSON array. A model without quota is
// refused at once, its quota 0.
func TestGeminiRateLimit(t *testing.T) {
	clock := newClock()
	p, srv := newServer(t, fakeprovider.Config{Now: clock.Now, Models: []fakeprovider.ModelLimits{
		{Name: "gemini-2.0-flash", RPM: 30}, {Name: "gemini-2.5-pro", NoQuota: true}}})
	path := "/v1beta/models/gemini-2.0-flash:generateContent"
	for i := range 30 {
		if status, _, b := post(t, srv, path, geminiBody); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, b)
		}
	}
	for _, tc := range []struct {
		name, path, body string
		wrapped          bool
	}{
		{"native", path, geminiBody, false},
		{"openai-compatible", "/v1beta/openai/chat/completions", `{"model":"gemini-2.0-flash","messages":[]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, b := post(t, srv, tc.path, tc.body)
			if status != http.StatusTooManyRequests || h.Get("Retry-After") != "" || h.Get("Retry-After-Ms") != "" {
				t.Fatalf("status %d, Retry-After %q: %s", status, h.Get("Retry-After"), b)
			}
			if tc.wrapped != (b[0] == '[') {
				t.Errorf("wrapped in an array: %v, want %v: %s", b[0] == '[', tc.wrapped, b)
			}
			l, ok := ratelimit.ParseGoogleError(b)
			if !ok || l.NoQuota || l.Model != "gemini-2.0-flash" || l.QuotaID != "GenerateRequestsPerMinutePerProjectPerModel-FreeTier" ||
				l.RetryDelay < 2*time.Second || l.RetryDelay > 6*time.Second {
				t.Errorf("ParseGoogleError = %+v, %v: %s", l, ok, b)
			}
		})
	}
	status, _, b := post(t, srv, "/v1beta/models/gemini-2.5-pro:generateContent", geminiBody)
	l, ok := ratelimit.ParseGoogleError(b)
	if status != http.StatusTooManyRequests || !ok || !l.NoQuota || l.Model != "gemini-2.5-pro" || !strings.Contains(string(b), "limit: 0") {
		t.Errorf("no quota: %d, %+v: %s", status, l, b)
	}
	clock.Advance(time.Minute)
	if status, _, b := post(t, srv, path, geminiBody); status != http.StatusOK {
		t.Errorf("after a minute: %d %s", status, b)
	}
	if got := p.Stats().RateLimited; got != 3 {
		t.Errorf("RateLimited %d, want 3", got)
	}
	status, _, b = send(t, srv, http.MethodPost, path, geminiBody, map[string]string{"X-Fake-Status": "429", "X-Fake-Retry-After": "2"})
	if l, ok := ratelimit.ParseGoogleError(b); status != http.StatusTooManyRequests || !ok || l.RetryDelay != 2*time.Second {
		t.Errorf("an injected 429: %d, %+v: %s", status, l, b)
	}
}
