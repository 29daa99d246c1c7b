package proxy

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// statusUpstream answers the status X-Test-Status names with an OpenAI
// error body, waits for the client to leave when X-Test-Stall is set, and
// answers any other request 200. With X-Test-Stream it sends the head of
// a 200 event stream and then waits for the client to leave, or with
// X-Test-Stream: abort cuts the stream itself.
func statusUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("X-Test-Stream") != "":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
			_ = http.NewResponseController(w).Flush()
			if r.Header.Get("X-Test-Stream") == "abort" {
				panic(http.ErrAbortHandler) // the upstream cuts its answer
			}
			<-r.Context().Done()
		case r.Header.Get("X-Test-Stall") != "":
			_, _ = io.Copy(io.Discard, r.Body) // read whole, the server notices the client leave
			<-r.Context().Done()
		case r.Header.Get("X-Test-Status") != "":
			code, _ := strconv.Atoi(r.Header.Get("X-Test-Status"))
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error":{"message":"refused","type":"invalid_request_error","code":null}}`)
		default:
			_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
		}
	})
}

// TestErrorsSettleToWhatTheyCost: tokens enforced as OpenAI charges them
// (max_tokens at admission, nothing given back for a short answer), a
// request the upstream answers with an error, or that never reached it,
// spent nothing, and its charge is given back at once: charged 500,000 of
// 600,000 tokens a minute and refused, it leaves the next request the
// pool's allowance. Kept, its overshoot spent the pool's tokens for most
// of a minute and the next request was refused after max_wait. A timeout
// keeps its charge: the request may have reached the provider.
func TestErrorsSettleToWhatTheyCost(t *testing.T) {
	tokens := func(url string) func(*Config, *quota.Config, *classify.Config, *[]classify.Caller) {
		return func(c *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
			if url != "" {
				c.Upstream.URL = url
			}
			c.Upstream.Provider = "openai"
			c.Upstream.ResponseHeaderTimeout = 100 * time.Millisecond
			q.Account.TokensPerMinute = 600000 // 10,000 a second
			q.Classes.Bulk.MaxWait = 2 * time.Second
		}
	}
	const big, small = `{"model":"m","max_tokens":500000,"messages":[]}`, `{"model":"m","messages":[]}`
	send := func(t *testing.T, url, body, header, value string) (int, []byte) {
		t.Helper()
		req := newRequest(t, http.MethodPost, url+"/v1/chat/completions", body)
		if header != "" {
			req.Header.Set(header, value)
		}
		status, _, raw := do(t, req)
		return status, raw
	}
	p := newTestProxy(t, proxyOpts{upstream: statusUpstream(), mutate: tokens("")})
	for _, code := range []int{http.StatusBadRequest, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		if status, raw := send(t, p.URL, big, "X-Test-Status", strconv.Itoa(code)); status != code {
			t.Fatalf("upstream %d: %d %s", code, status, raw)
		}
		if status, raw := send(t, p.URL, small, "", ""); status != http.StatusOK {
			t.Errorf("after an upstream %d, the next request: %d %s; want 200 (the refused request's charge given back)", code, status, raw)
		}
	}
	dead := newTestProxy(t, proxyOpts{upstream: statusUpstream(), mutate: tokens("http://127.0.0.1:1")}) // nothing listens on port 1
	for i := range 2 {
		if status, raw := send(t, dead.URL, big, "", ""); status != http.StatusBadGateway {
			t.Errorf("unreachable upstream, request %d: %d %s; want 502 (the one before never left: its charge given back)", i, status, raw)
		}
	}
	if status, raw := send(t, p.URL, big, "X-Test-Stall", "1"); status != http.StatusGatewayTimeout {
		t.Fatalf("a stalled upstream: %d %s, want 504", status, raw)
	}
	if status, raw := send(t, p.URL, small, "", ""); status != http.StatusTooManyRequests {
		t.Errorf("after a timeout, the next request: %d %s; want 429 (the charge kept: it may have reached the provider)", status, raw)
	}
}
