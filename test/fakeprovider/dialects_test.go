package fakeprovider_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestDialectHeaders: each OpenAI-compatible host's rate-limit headers,
// computed from buckets of its own spans — Together's a second,
// Fireworks' prompt and generated tokens a second and its over-limit
// word, Mistral's tokens a minute without request counts, Groq's
// requests a day with fractional resets — and none of OpenAI's names the
// host does not send.
func TestDialectHeaders(t *testing.T) {
	scenarios := []struct {
		name  string
		cfg   fakeprovider.Config
		steps []step
	}{
		{"together", fakeprovider.Config{Dialect: fakeprovider.DialectTogether, RPM: 600, TPM: 6000}, []step{
			{"first", 0, 1, 200, map[string]string{
				"x-ratelimit-limit": "10", "x-ratelimit-remaining": "9", "x-ratelimit-reset": "0.1",
				"x-tokenlimit-limit": "100", "x-tokenlimit-remaining": strconv.Itoa(100 - promptTokens(chatBodyMin)),
				"x-ratelimit-limit-requests": "", "x-ratelimit-limit-tokens": ""}},
			{"the second's requests spent", 0, 9, 200, map[string]string{"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1"}},
			{"over its rate: 429", 0, 1, 429, map[string]string{"x-ratelimit-remaining": "0", "retry-after": "1"}},
			{"a second later", 2 * time.Second, 1, 200, map[string]string{"x-ratelimit-remaining": "9"}},
		}},
		{"fireworks", fakeprovider.Config{Dialect: fakeprovider.DialectFireworks, RPM: 60, TPM: 6000, OutputTPM: 6000}, []step{
			{"first", 0, 1, 200, map[string]string{
				"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
				"x-ratelimit-limit-tokens-prompt": "100", "x-ratelimit-remaining-tokens-prompt": strconv.Itoa(100 - promptTokens(chatBodyMin)),
				"x-ratelimit-limit-tokens-generated": "100", "x-ratelimit-remaining-tokens-generated": "100",
				"x-ratelimit-over-limit": "", "x-ratelimit-limit-tokens": ""}},
			{"past the prompt tokens a second: served, over", 0, 100 / promptTokens(chatBodyMin), 200, map[string]string{
				"x-ratelimit-remaining-tokens-prompt": "0", "x-ratelimit-over-limit": "yes"}},
			{"a second later", time.Second, 1, 200, map[string]string{"x-ratelimit-over-limit": ""}},
		}},
		{"mistral", fakeprovider.Config{Dialect: fakeprovider.DialectMistral, RPM: 60, TPM: 600}, []step{
			{"first", 0, 1, 200, map[string]string{
				"x-ratelimitbysize-limit-minute": "600", "x-ratelimitbysize-remaining-minute": strconv.Itoa(600 - promptTokens(chatBodyMin)),
				"x-ratelimit-limit-requests": "", "x-ratelimit-limit": "", "x-ratelimit-limit-tokens": ""}},
		}},
		{"groq", fakeprovider.Config{Dialect: fakeprovider.DialectGroq, RPM: 7, TPM: 600}, []step{
			{"first", 0, 1, 200, map[string]string{
				"x-ratelimit-limit-requests": "10080", "x-ratelimit-remaining-requests": "10079", "x-ratelimit-reset-requests": "8.58s",
				"x-ratelimit-limit-tokens": "600", "x-ratelimit-remaining-tokens": strconv.Itoa(600 - promptTokens(chatBodyMin)),
				"x-ratelimit-reset-tokens": (time.Duration(promptTokens(chatBodyMin)) * 100 * time.Millisecond).String()}},
		}},
		{"deepseek sends none", fakeprovider.Config{Dialect: fakeprovider.DialectDeepSeek, RPM: 60, TPM: 600}, []step{
			{"first", 0, 1, 200, map[string]string{"x-ratelimit-limit-requests": "", "x-ratelimit-limit-tokens": "", "x-request-id": "req_0000000000000001"}},
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := newClock()
			sc.cfg.Now = clock.Now
			_, srv := newServer(t, sc.cfg)
			for _, st := range sc.steps {
				clock.Advance(st.advance)
				runStep(t, srv, "/v1/chat/completions", chatBodyMin, st)
			}
		})
	}
}

// TestDialectFireworksGenerated: Fireworks' generated tokens are owed as
// each answer ends, and the next answer reports them; past the bucket the
// requests are served, over the limit.
func TestDialectFireworksGenerated(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{Dialect: fakeprovider.DialectFireworks, OutputTPM: 600})
	status, h, b := post(t, srv, "/v1/chat/completions", chatBodyMin)
	if status != http.StatusOK || h.Get("x-ratelimit-remaining-tokens-generated") != "10" {
		t.Fatalf("first: %d generated remaining %q: %s", status, h.Get("x-ratelimit-remaining-tokens-generated"), b)
	}
	out := decode[struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}](t, b).Usage.CompletionTokens
	status, h, _ = post(t, srv, "/v1/chat/completions", chatBodyMin)
	want := strconv.Itoa(max(10-out, 0))
	if got := h.Get("x-ratelimit-remaining-tokens-generated"); status != http.StatusOK || got != want {
		t.Errorf("second: %d generated remaining %q, want %s (the first answer's %d tokens owed)", status, got, want, out)
	}
	if over := h.Get("x-ratelimit-over-limit"); (out > 10) != (over == "yes") {
		t.Errorf("over-limit %q after %d of 10 generated tokens", over, out)
	}
	if st := p.Stats(); st.RateLimited != 0 || st.Served != 2 {
		t.Errorf("stats %+v, want 2 served, none refused", st)
	}
}

// TestDialectOverCapacity: Together's split — a model over capacity is
// answered 503 in OpenAI's error shape while the caller's rate has room
// (its headers say so), a caller over its rate 429.
func TestDialectOverCapacity(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{Dialect: fakeprovider.DialectTogether, RPM: 120, OverCapacity: 0.5})
	var statuses []int
	var remaining []string
	for range 4 {
		status, h, b := post(t, srv, "/v1/chat/completions", chatBodyMin)
		statuses, remaining = append(statuses, status), append(remaining, h.Get("x-ratelimit-remaining"))
		if status == http.StatusServiceUnavailable {
			checkErrorBody(t, "/v1/chat/completions", b, "server_error", "server_is_overloaded")
		}
	}
	if want := []int{200, 503, 429, 429}; !equalInts(statuses, want) {
		t.Errorf("statuses %v (remaining %v), want %v: the second over capacity, then the second's 2 requests spent", statuses, remaining, want)
	}
	if remaining[1] != "0" {
		t.Errorf("the 503 said %q requests remaining, want the bucket's 0", remaining[1])
	}
	p.SetOverCapacity(0)
	if st := p.Stats(); st.Failed != 1 || st.RateLimited != 2 || st.Served != 1 {
		t.Errorf("stats %+v, want 1 served, 1 failed (503), 2 rate-limited", st)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDialectDeepSeekKeepAlives: while a request queues, DeepSeek's answer
// has begun (200) and the wait is filled with ": keep-alive" comments (a
// stream) or empty lines (JSON); then the answer follows as usual.
func TestDialectDeepSeekKeepAlives(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{Dialect: fakeprovider.DialectDeepSeek, Latency: 300 * time.Millisecond,
		KeepAlive: 50 * time.Millisecond, Now: time.Now})
	t.Run("stream", func(t *testing.T) {
		status, h, b := post(t, srv, "/v1/chat/completions", `{"model":"deepseek-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		rest, n := string(b), 0
		for cut, ok := strings.CutPrefix(rest, ": keep-alive\n\n"); ok; cut, ok = strings.CutPrefix(rest, ": keep-alive\n\n") {
			rest, n = cut, n+1
		}
		if status != http.StatusOK || h.Get("Content-Type") != "text/event-stream" || n < 2 || !strings.HasPrefix(rest, "data: ") {
			t.Errorf("%d %s, %d keep-alives: %.200q", status, h.Get("Content-Type"), n, b)
		}
		if msgs := parseSSE(t, []byte(rest)); len(msgs) == 0 || msgs[len(msgs)-1].data != "[DONE]" {
			t.Errorf("the stream after the keep-alives: %q", rest)
		}
	})
	t.Run("json", func(t *testing.T) {
		status, h, b := post(t, srv, "/v1/chat/completions", `{"model":"deepseek-chat","messages":[{"role":"user","content":"hi"}]}`)
		rest := strings.TrimLeft(string(b), "\n")
		if status != http.StatusOK || h.Get("Content-Type") != "application/json" || len(b)-len(rest) < 2 {
			t.Fatalf("%d %s, %d empty lines: %.200q", status, h.Get("Content-Type"), len(b)-len(rest), b)
		}
		if got := decode[struct {
			Object string `json:"object"`
		}](t, []byte(rest)); got.Object != "chat.completion" {
			t.Errorf("the answer after the empty lines: %s", rest)
		}
	})
}
