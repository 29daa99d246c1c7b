package fakeprovider_test

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

const chatBodyMin = `{"messages":[{"role":"user","content":"hi"}]}`

// step is a burst of requests after the fake clock moved.
type step struct {
	name        string
	advance     time.Duration
	n           int
	wantStatus  int               // of every request in the burst
	wantHeaders map[string]string // of the last response; "" means absent
}

func TestRateLimitOpenAI(t *testing.T) {
	scenarios := []struct {
		name  string
		rpm   int
		steps []step
	}{
		{"60 rpm", 60, []step{
			{"first", 0, 1, 200, map[string]string{
				"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
				"x-ratelimit-reset-requests": "1s", "retry-after": ""}},
			{"bucket emptied", 0, 59, 200, map[string]string{
				"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s"}},
			{"refused", 0, 1, 429, map[string]string{
				"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m1s",
				"retry-after": "2", "retry-after-ms": "2000"}},
			{"one refill is spent by the refused debt", time.Second, 1, 429, map[string]string{
				"retry-after": "2", "retry-after-ms": "2000"}},
			{"refilled", 2 * time.Second, 1, 200, map[string]string{
				"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s", "retry-after": ""}},
			{"fractional retry", 500 * time.Millisecond, 1, 429, map[string]string{
				"retry-after": "2", "retry-after-ms": "1500", "x-ratelimit-reset-requests": "1m0.5s"}},
		}},
		{"40 rpm has fractional resets", 40, []step{
			{"first", 0, 1, 200, map[string]string{"x-ratelimit-reset-requests": "1.5s", "x-ratelimit-remaining-requests": "39"}},
		}},
		{"debt is bounded by -rpm", 2, []step{
			{"empty the bucket", 0, 2, 200, nil},
			{"hammer", 0, 10, 429, map[string]string{"retry-after": "90", "retry-after-ms": "90000"}},
			{"90s pays the bounded debt", 90 * time.Second, 1, 200, map[string]string{"x-ratelimit-remaining-requests": "0"}},
		}},
		{"unlimited sends no headers", 0, []step{
			{"burst", 0, 100, 200, map[string]string{"x-ratelimit-limit-requests": "", "x-ratelimit-remaining-requests": ""}},
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := newClock()
			_, srv := newServer(t, fakeprovider.Config{RPM: sc.rpm, Now: clock.Now})
			for _, st := range sc.steps {
				clock.Advance(st.advance)
				runStep(t, srv, "/v1/chat/completions", chatBodyMin, st)
			}
		})
	}
}

func runStep(t *testing.T, srv *httptest.Server, path, body string, st step) {
	t.Helper()
	var last http.Header // headers of the last response
	for i := range st.n {
		status, header, b := post(t, srv, path, body)
		last = header
		if status != st.wantStatus {
			t.Fatalf("%s: request %d: status %d, want %d: %s", st.name, i, status, st.wantStatus, b)
		}
		if status == http.StatusTooManyRequests {
			checkRateLimitBody(t, path, b)
		}
	}
	for k, want := range st.wantHeaders {
		if got := last.Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q", st.name, k, got, want)
		}
	}
}

// checkRateLimitBody checks a 429 body has the provider's rate-limit error
// shape.
func checkRateLimitBody(t *testing.T, path string, b []byte) {
	t.Helper()
	if path == "/v1/messages" {
		got := decode[anthropicErrorBody](t, b)
		if got.Type != "error" || got.Error.Type != "rate_limit_error" || got.Error.Message == "" {
			t.Errorf("429 body = %s", b)
		}
		return
	}
	got := decode[openAIErrorBody](t, b)
	if got.Error.Type != "rate_limit_error" || got.Error.Code == nil || *got.Error.Code != "rate_limit_exceeded" {
		t.Errorf("429 body = %s", b)
	}
}

func TestRateLimitAnthropic(t *testing.T) {
	clock := newClock()
	_, srv := newServer(t, fakeprovider.Config{RPM: 60, TPM: 6000, Now: clock.Now})
	steps := []step{
		{"first", 0, 1, 200, map[string]string{
			"anthropic-ratelimit-requests-limit":     "60",
			"anthropic-ratelimit-requests-remaining": "59",
			"anthropic-ratelimit-requests-reset":     "2026-03-14T15:09:27Z",
			"anthropic-ratelimit-tokens-limit":       "6000",
			"x-ratelimit-limit-requests":             "",
			"x-request-id":                           "",
		}},
		{"empty", 0, 59, 200, map[string]string{
			"anthropic-ratelimit-requests-remaining": "0",
			"anthropic-ratelimit-requests-reset":     "2026-03-14T15:10:26Z",
		}},
		{"refused, reset rounded up", 250 * time.Millisecond, 1, 429, map[string]string{
			"anthropic-ratelimit-requests-reset": "2026-03-14T15:10:27Z",
			"retry-after":                        "2", "retry-after-ms": "1750",
		}},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		runStep(t, srv, "/v1/messages", claudeTwo+"}", st)
	}
	_, header, _ := post(t, srv, "/v1/messages", claudeTwo+"}")
	if header.Get("request-id") == "" {
		t.Error("no request-id")
	}
}

func TestTokenHeaders(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{TPM: 6000})
	_, header, _ := post(t, srv, "/v1/chat/completions", chatBodyMin)
	spent := promptTokens(chatBodyMin)
	want := map[string]string{
		"x-ratelimit-limit-tokens":     "6000",
		"x-ratelimit-remaining-tokens": strconv.Itoa(6000 - spent),
		"x-ratelimit-reset-tokens":     (time.Duration(spent) * 10 * time.Millisecond).String(), // 100 tokens/s
		"x-ratelimit-limit-requests":   "",
	}
	for k, v := range want {
		if got := header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if header.Get("x-request-id") == "" {
		t.Error("no x-request-id")
	}
}

func TestArrivalsCountRefused(t *testing.T) {
	clock := newClock()
	p, srv := newServer(t, fakeprovider.Config{RPM: 60, Now: clock.Now})
	codes := map[int]int{}
	for range 70 {
		status, _, _ := post(t, srv, "/v1/chat/completions", chatBodyMin)
		codes[status]++
	}
	clock.Advance(time.Second)
	for range 5 {
		status, _, _ := post(t, srv, "/v1/chat/completions", chatBodyMin)
		codes[status]++
	}
	if codes[200] != 60 || codes[429] != 15 {
		t.Errorf("statuses = %v, want 60×200 and 15×429", codes)
	}
	want := map[int64]int{t0.Unix(): 70, t0.Unix() + 1: 5}
	if got := p.Arrivals(); !maps.Equal(got, want) {
		t.Errorf("arrivals = %v, want %v", got, want)
	}
	st := p.Stats()
	if st.Requests != 75 || st.Served != 60 || st.RateLimited != 15 || st.Failed != 0 {
		t.Errorf("stats = %+v", st)
	}
}
