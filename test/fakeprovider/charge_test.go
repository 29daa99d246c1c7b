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
	}{
		{"openai: max_tokens above the prompt", "/v1/chat/completions", `,"max_tokens":1000`, "5000", "x-ratelimit-remaining-tokens"},
		{"openai: the prompt above max_tokens", "/v1/chat/completions", `,"max_tokens":10`, "5900", "x-ratelimit-remaining-tokens"},
		{"azure: prompt + max_tokens × best_of", "/openai/deployments/gpt-4o/chat/completions", `,"max_tokens":100,"best_of":2`, "5700", "x-ratelimit-remaining-tokens"},
		{"anthropic: input now, output as generated", "/v1/messages", `,"model":"c","max_tokens":4096`, "5900", "anthropic-ratelimit-tokens-remaining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFake()
			rec := post(p, tt.path, body(tt.fields))
			if rec.Code != http.StatusOK || rec.Header().Get(tt.header) != tt.remaining {
				t.Fatalf("status %d, %s %q; want 200 and %s", rec.Code, tt.header, rec.Header().Get(tt.header), tt.remaining)
			}
		})
	}
	t.Run("anthropic's output is charged after the answer", func(t *testing.T) {
		p := newFake()
		post(p, "/v1/messages", body(`,"model":"c","max_tokens":4096`))
		rec := post(p, "/v1/messages", body(`,"model":"c","max_tokens":4096`))
		// 100 input each; the first reply's words were charged in between.
		if got, err := strconv.Atoi(rec.Header().Get("anthropic-ratelimit-tokens-remaining")); err != nil || got >= 5800 {
			t.Fatalf("remaining %d (%v) after two requests; want below 5800 (their input and the first reply's output)", got, err)
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
