package fakeprovider_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestEnforcedTokensChargeByProvider: with EnforceTPM each path is charged
// as its provider charges, refused with 429 when the bucket holds less, and
// reports it in the provider's own headers.
func TestEnforcedTokensChargeByProvider(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	newFake := func() *fakeprovider.Provider {
		return fakeprovider.New(fakeprovider.Config{TPM: 6000, EnforceTPM: true, Latency: 0, Now: func() time.Time { return now }})
	}
	// A body of 400 bytes is 100 prompt tokens.
	body := func(fields string) string {
		prefix := `{"messages":[{"role":"user","content":"`
		suffix := `"}]` + fields + `}`
		return prefix + strings.Repeat("x", 400-len(prefix)-len(suffix)) + suffix
	}
	post := func(p *fakeprovider.Provider, path, b string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(b)))
		return rec
	}
	tests := []struct {
		name, path, fields string
		remaining          string // after one request, by the provider's header
		header             string
		exact              int // remaining in the log, unrounded
	}{
		{"openai: max_tokens above the prompt", "/v1/chat/completions", `,"max_tokens":1000`, "5000", "x-ratelimit-remaining-tokens", 5000},
		{"openai: the prompt above max_tokens", "/v1/chat/completions", `,"max_tokens":10`, "5900", "x-ratelimit-remaining-tokens", 5900},
		{"azure: prompt + max_tokens × best_of", "/openai/deployments/gpt-4o/chat/completions", `,"max_tokens":100,"best_of":2`, "5700", "x-ratelimit-remaining-tokens", 5700},
		{"anthropic: input now, output as generated, remaining to the thousand", "/v1/messages", `,"model":"c","max_tokens":4096`, "6000", "anthropic-ratelimit-tokens-remaining", 5900},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFake()
			rec := post(p, tt.path, body(tt.fields))
			if rec.Code != http.StatusOK || rec.Header().Get(tt.header) != tt.remaining {
				t.Fatalf("status %d, %s %q; want 200 and %s", rec.Code, tt.header, rec.Header().Get(tt.header), tt.remaining)
			}
			if r := p.Requests()[0]; r.TokensCharged < 100 || r.TokensRemaining != tt.exact {
				t.Fatalf("logged %d charged, %d remaining; want at least the 100 input, and %d remaining", r.TokensCharged, r.TokensRemaining, tt.exact)
			}
		})
	}
	t.Run("anthropic's output is charged after the answer", func(t *testing.T) {
		p := newFake()
		post(p, "/v1/messages", body(`,"model":"c","max_tokens":4096`))
		post(p, "/v1/messages", body(`,"model":"c","max_tokens":4096`))
		// 100 input each; the first reply's words were charged in between.
		log := p.Requests()
		if got := log[1].TokensRemaining; got >= 5800 || got != 6000-log[0].TokensCharged-100 {
			t.Fatalf("remaining %d after two requests (the first charged %d); want below 5800: their input and the first reply's output", got, log[0].TokensCharged)
		}
	})
	t.Run("refused when the bucket holds less than the charge", func(t *testing.T) {
		p := newFake()
		for range 5 {
			if rec := post(p, "/v1/chat/completions", body(`,"max_tokens":1000`)); rec.Code != http.StatusOK {
				t.Fatalf("within the bucket: %d", rec.Code)
			}
		}
		rec := post(p, "/v1/chat/completions", body(`,"max_tokens":2000`)) // 1000 left, 2000 asked
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("retry-after") != "10" {
			t.Fatalf("over the bucket: %d, retry-after %q; want 429 and 10 s (1000 tokens at 100 a second)", rec.Code, rec.Header().Get("retry-after"))
		}
		if got := rec.Header().Get("x-ratelimit-remaining-tokens"); got != "1000" {
			t.Fatalf("a refused charge took tokens: remaining %q, want 1000", got)
		}
	})
	t.Run("azure resets are bare seconds", func(t *testing.T) {
		p := newFake()
		rec := post(p, "/openai/v1/chat/completions", body(`,"max_tokens":50`))
		if got := rec.Header().Get("x-ratelimit-reset-tokens"); got != "2" { // 150 tokens at 100 a second, rounded up
			t.Fatalf("x-ratelimit-reset-tokens %q, want \"2\"", got)
		}
	})
}

// TestAnthropicOutputBucket: with OutputTPM, Anthropic's input and output
// are limited apart: input charged at admission to TPM, output into debt
// as generated; a request arriving while the output bucket is spent is
// refused, and the headers carry both families, tokens as their sum, token
// remainders rounded to the nearest thousand.
func TestAnthropicOutputBucket(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := fakeprovider.New(fakeprovider.Config{TPM: 60000, OutputTPM: 6000, EnforceTPM: true, Now: func() time.Time { return now }})
	post := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		b := `{"model":"c","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(b)))
		return rec
	}
	rec := post()
	h := rec.Header()
	first := p.Requests()[0]
	if rec.Code != http.StatusOK || first.OutputCharged == 0 || first.TokensCharged != 19 {
		t.Fatalf("status %d, charged %d input and %d output; want 200, the prompt's 19 (77 bytes) and the reply's words", rec.Code, first.TokensCharged, first.OutputCharged)
	}
	for k, want := range map[string]string{
		"anthropic-ratelimit-input-tokens-limit":      "60000",
		"anthropic-ratelimit-input-tokens-remaining":  "60000", // 59,981 to the thousand
		"anthropic-ratelimit-output-tokens-limit":     "6000",
		"anthropic-ratelimit-output-tokens-remaining": "6000", // charged after these headers
		"anthropic-ratelimit-tokens-limit":            "66000",
		"anthropic-ratelimit-tokens-remaining":        "66000",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	// Spend the output bucket: 6,000 tokens is 6000/OutputCharged replies.
	n := 1
	for ; p.Requests()[n-1].Status == http.StatusOK && n < 10000; n++ {
		rec = post()
	}
	spent := 0
	for _, r := range p.Requests() {
		spent += r.OutputCharged
	}
	if rec.Code != http.StatusTooManyRequests || spent < 6000 || spent >= 6000+first.OutputCharged {
		t.Fatalf("after %d requests (%d output charged): status %d; want a 429 once 6,000 were generated", n, spent, rec.Code)
	}
	if got := rec.Header().Get("anthropic-ratelimit-output-tokens-remaining"); got != "0" {
		t.Fatalf("refused with output remaining %q, want 0", got)
	}
	wantRetry := strconv.Itoa(int((time.Duration(spent-6000+1)*10*time.Millisecond + time.Second - 1) / time.Second)) // 100 a second
	if got := rec.Header().Get("retry-after"); got != wantRetry {
		t.Fatalf("retry-after %q, want %s (the debt of %d at 100 a second)", got, wantRetry, spent-6000)
	}
	if last := p.Requests()[n-1]; last.TokensCharged != 0 {
		t.Fatalf("a request refused for output was charged %d input", last.TokensCharged)
	}
}

// TestWindowBuckets: with Window the buckets refill all at once at each
// window's start, to the window's share of the minute; remaining reads at
// the per-minute scale and reset is the window's end.
func TestWindowBuckets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0) // a multiple of 10 s
	p := fakeprovider.New(fakeprovider.Config{TPM: 60000, EnforceTPM: true, Window: 10 * time.Second, Now: func() time.Time { return now }})
	post := func(maxTokens int) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		b := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":` + strconv.Itoa(maxTokens) + `}`
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/openai/deployments/d/chat/completions", strings.NewReader(b)))
		return rec
	}
	now = now.Add(2500 * time.Millisecond)
	rec := post(2500 - 16) // 16 prompt tokens (64 bytes) + max_tokens: a quarter of the window's 10,000
	if rec.Code != http.StatusOK || rec.Header().Get("x-ratelimit-remaining-tokens") != "45000" || rec.Header().Get("x-ratelimit-reset-tokens") != "8" {
		t.Fatalf("status %d, remaining %q, reset %q; want 200, 45000 (¾ of the window at the minute's scale), 8 (7.5 s to the window's end)",
			rec.Code, rec.Header().Get("x-ratelimit-remaining-tokens"), rec.Header().Get("x-ratelimit-reset-tokens"))
	}
	now = now.Add(5 * time.Second) // no refill within the window
	if rec = post(7600 - 16); rec.Code != http.StatusTooManyRequests || rec.Header().Get("retry-after") != "3" {
		t.Fatalf("over the window: %d, retry-after %q; want 429 until the window's end (2.5 s → 3)", rec.Code, rec.Header().Get("retry-after"))
	}
	now = now.Add(2500 * time.Millisecond) // the next window: full again
	if rec = post(7600 - 16); rec.Code != http.StatusOK || rec.Header().Get("x-ratelimit-remaining-tokens") != "14400" {
		t.Fatalf("next window: %d, remaining %q; want 200 and 14400", rec.Code, rec.Header().Get("x-ratelimit-remaining-tokens"))
	}
}

// TestModelLimits: a model listed in Config.Models draws on buckets of its
// own and reports them; an Azure deployment is a model; every other
// request draws on the account's.
func TestModelLimits(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := fakeprovider.New(fakeprovider.Config{RPM: 600, Now: func() time.Time { return now },
		Models: []fakeprovider.ModelLimits{{Name: "small", RPM: 60}, {Name: "dep", RPM: 120}}})
	post := func(path, model string) http.Header {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"model":"`+model+`","messages":[]}`)))
		return rec.Header()
	}
	for _, tt := range []struct{ path, model, limit, remaining string }{
		{"/v1/chat/completions", "small", "60", "59"},
		{"/v1/chat/completions", "small", "60", "58"},
		{"/v1/chat/completions", "big", "600", "599"},
		{"/v1/chat/completions", "", "600", "598"},
		{"/openai/deployments/dep/chat/completions", "small", "120", "119"}, // the deployment, not the body, names it
	} {
		h := post(tt.path, tt.model)
		if got, rem := h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"); got != tt.limit || rem != tt.remaining {
			t.Errorf("%s %q: limit %s remaining %s, want %s and %s", tt.path, tt.model, got, rem, tt.limit, tt.remaining)
		}
	}
}
