package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// echoUpstream answers with what it received: method, path, credential
// headers, the class header and the body.
type seen struct {
	Method, Path, Authorization, APIKey, XAPIKey, Class, Body, XGoogAPIKey string
}

func echoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		got := seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Api-Key"),
			r.Header.Get("X-Api-Key"), r.Header.Get("X-Meterproxy-Class"), string(body), r.Header.Get("X-Goog-Api-Key")}
		_ = json.NewEncoder(w).Encode(got) //nolint:gosec // G117: the test upstream echoes the fixture credentials it received; the tests assert them
	})
}

func TestForwardsUntouched(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream()})
	for _, body := range []string{`{"model":"gpt","messages":[]}`, `{"model": "gpt", "messages": [`, ""} {
		req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", body)
		req.Header.Set("Authorization", "Bearer sk-caller")
		req.Header.Set("X-Meterproxy-Class", "bulk")
		status, _, raw := do(t, req)
		var got seen
		if err := json.Unmarshal(raw, &got); err != nil || status != 200 {
			t.Fatalf("status %d body %q: %v", status, raw, err)
		}
		want := seen{Method: "POST", Path: "/v1/chat/completions", Authorization: "Bearer sk-caller", Body: body}
		if got != want {
			t.Errorf("upstream saw %+v, want %+v (body untouched, caller key passed through, class header dropped)", got, want)
		}
	}
}

func TestCredentialReplacement(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Upstream.APIKey = "sk-upstream"
	}})
	tests := []struct {
		name, path, header, value string
		want                      seen
	}{
		{"bearer", "/v1/chat/completions", "Authorization", "Bearer sk-caller", seen{Authorization: "Bearer sk-upstream"}},
		{"azure api-key", "/openai/deployments/d/chat/completions", "Api-Key", "caller", seen{APIKey: "sk-upstream"}},
		{"anthropic x-api-key", "/v1/messages", "X-Api-Key", "caller", seen{XAPIKey: "sk-upstream"}},
		{"none, openai path", "/v1/embeddings", "", "", seen{Authorization: "Bearer sk-upstream"}},
		{"none, anthropic path", "/v1/messages", "", "", seen{XAPIKey: "sk-upstream"}},
		{"gemini x-goog-api-key", "/v1beta/models/gemini-2.0-flash:generateContent", "X-Goog-Api-Key", "caller", seen{XGoogAPIKey: "sk-upstream"}},
		{"none, gemini path", "/v1beta/models/gemini-2.0-flash:generateContent", "", "", seen{XGoogAPIKey: "sk-upstream"}},
		{"none, gemini openai-compatible path", "/v1beta/openai/chat/completions", "", "", seen{Authorization: "Bearer sk-upstream"}},
		// A held key goes in the header its provider reads keys from,
		// wherever the caller put its own: Gemini reads OAuth tokens from
		// Authorization, API keys from x-goog-api-key; Anthropic OAuth
		// tokens from Authorization, keys from x-api-key.
		{"bearer on a gemini path", "/v1beta/models/gemini-2.0-flash:generateContent", "Authorization", "Bearer sk-caller", seen{XGoogAPIKey: "sk-upstream"}},
		{"bearer on an anthropic path", "/v1/messages", "Authorization", "Bearer sk-caller", seen{XAPIKey: "sk-upstream"}},
		{"x-api-key on an openai path", "/v1/chat/completions", "X-Api-Key", "caller", seen{Authorization: "Bearer sk-upstream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, http.MethodPost, p.URL+tt.path, "{}")
			if tt.header != "" {
				req.Header.Set(tt.header, tt.value)
			}
			_, _, raw := do(t, req)
			var got seen
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			tt.want.Method, tt.want.Path, tt.want.Body = "POST", tt.path, "{}"
			if got != tt.want {
				t.Errorf("upstream saw %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStreamReachesClientBeforeUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-release // the upstream finishes only after the client saw the first event
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	p := newTestProxy(t, proxyOpts{upstream: upstream})
	res, err := http.DefaultClient.Do(newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	rd := bufio.NewReader(res.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "data: {\"n\":1}\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(rd)
	if err != nil || string(rest) != "\ndata: [DONE]\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

func TestRefusals(t *testing.T) {
	key := "sk-known"
	sum := sha256.Sum256([]byte(key))
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream(), mutate: func(c *Config, _ *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
		c.Server.MaxBodyBytes = 1024
		cc.UnknownCallers = classify.UnknownReject
		*callers = []classify.Caller{{Name: "app", KeySHA256: hex.EncodeToString(sum[:]), Class: classify.Interactive}}
	}})
	tests := []struct {
		name, path, key, body string
		chunked               bool
		status                int
		check                 func(t *testing.T, raw []byte)
	}{
		{"unknown caller", "/v1/chat/completions", "sk-stranger", "{}", false, 401, openAIShape("authentication_error", "unknown_caller")},
		{"no key", "/v1/chat/completions", "", "{}", false, 401, openAIShape("authentication_error", "unknown_caller")},
		{"oversized body", "/v1/chat/completions", key, strings.Repeat("x", 1025), false, 413, openAIShape("invalid_request_error", "body_too_large")},
		{"oversized chunked body", "/v1/chat/completions", key, strings.Repeat("x", 4096), true, 413, openAIShape("invalid_request_error", "body_too_large")},
		{"oversized, anthropic shape", "/v1/messages", key, strings.Repeat("x", 2048), false, 413, anthropicShape("invalid_request_error")},
		{"body at the limit", "/v1/chat/completions", key, strings.Repeat("x", 1024), false, 200, func(*testing.T, []byte) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, http.MethodPost, p.URL+tt.path, tt.body)
			if tt.chunked {
				req.ContentLength = -1
				req.Body = io.NopCloser(strings.NewReader(tt.body))
			}
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			status, _, raw := do(t, req)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, raw)
			}
			if status != 200 && (strings.Contains(string(raw), key) || strings.Contains(string(raw), "stranger")) {
				t.Errorf("error body leaks the key: %s", raw)
			}
			tt.check(t, raw)
		})
	}
	if strings.Contains(p.logs.String(), "sk-") {
		t.Errorf("logs mention a key:\n%s", p.logs.String())
	}
}

func openAIShape(kind, code string) func(*testing.T, []byte) {
	return func(t *testing.T, raw []byte) {
		t.Helper()
		var e openAIError
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Type != kind || e.Error.Code != code || e.Error.Message == "" {
			t.Errorf("body %s, want an OpenAI error of type %s code %s", raw, kind, code)
		}
	}
}

func anthropicShape(kind string) func(*testing.T, []byte) {
	return func(t *testing.T, raw []byte) {
		t.Helper()
		var e anthropicError
		if err := json.Unmarshal(raw, &e); err != nil || e.Type != "error" || e.Error.Type != kind || e.Error.Message == "" {
			t.Errorf("body %s, want an Anthropic error of type %s", raw, kind)
		}
	}
}

// slowQuota admits one bulk request a minute and queues one more.
func slowQuota(_ *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
	q.Account.RequestsPerMinute = 1
	q.Classes.Interactive.Share, q.Classes.Interactive.Reserve = 0, 0
	q.Classes.Bulk = quota.BulkConfig{Share: 1, MaxWait: time.Hour, MaxQueue: 1}
}

func TestQueueRefusalAndDisconnect(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream(), mutate: slowQuota})
	// The first request of the minute... may or may not fall in an admitting
	// second; so fill the queue with a request that will wait.
	ctx, cancel := context.WithCancel(t.Context())
	held := make(chan error, 1)
	go func() {
		for {
			req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", "{}").WithContext(ctx)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				held <- err
				return
			}
			_ = res.Body.Close() // admitted in an admitting second: go again until one waits
		}
	}()
	waitFor(t, "a bulk request to be held", func() bool { return p.admitter.State().Queued["bulk"] == 1 })

	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		status, header, raw := do(t, newRequest(t, http.MethodPost, p.URL+path, "{}"))
		if status != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d, want 429: %s", path, status, raw)
		}
		if header.Get("Retry-After") == "" || header.Get("Retry-After") == "0" ||
			header.Get("Retry-After-Ms") == "" || header.Get("X-Should-Retry") != "true" {
			t.Errorf("%s: retry headers %v", path, header)
		}
		if path == "/v1/messages" {
			anthropicShape("rate_limit_error")(t, raw)
		} else {
			openAIShape("rate_limit_error", "queue_full")(t, raw)
		}
	}

	cancel() // the held client disconnects: it leaves the queue at once
	if err := <-held; !errors.Is(err, context.Canceled) {
		t.Fatalf("held request ended with %v", err)
	}
	waitFor(t, "the queue to empty", func() bool { return p.admitter.State().Queued["bulk"] == 0 })
	waitFor(t, "the cancellation to be counted", func() bool {
		return counterValue(t, p.reg, "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "cancelled"}) == 1
	})
	if n := p.admitter.State().InFlight["bulk"]; n != 0 {
		t.Errorf("in flight %d after everything ended, want 0", n)
	}
	// The two refusals' waits are observed as refused; the client that
	// left is in neither outcome.
	refusedWaits := histogramCount(t, p.reg, "meterproxy_queue_wait_seconds", map[string]string{"class": "bulk", "outcome": "refused"})
	admittedWaits := histogramCount(t, p.reg, "meterproxy_queue_wait_seconds", map[string]string{"class": "bulk", "outcome": "admitted"})
	admitted := counterValue(t, p.reg, "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "admitted"}) +
		counterValue(t, p.reg, "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"})
	if refusedWaits != 2 || float64(admittedWaits) != admitted {
		t.Errorf("queue waits: %d refused, %d admitted; want 2, and %v (one per admission)", refusedWaits, admittedWaits, admitted)
	}
}

func TestUpstreamFailures(t *testing.T) {
	var calls atomic.Int32
	stall := make(chan struct{})
	upstream := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})
	p := newTestProxy(t, proxyOpts{upstream: upstream, mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Upstream.ResponseHeaderTimeout = 50 * time.Millisecond
	}})
	t.Cleanup(func() { close(stall) }) // before the upstream closes: cleanups run last-first
	status, _, raw := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", "{}"))
	if status != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504: %s", status, raw)
	}
	openAIShape("api_error", "upstream_timeout")(t, raw)

	dead := newTestProxy(t, proxyOpts{upstream: echoUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Upstream.URL = "http://127.0.0.1:1" // nothing listens on port 1
	}})
	status, _, raw = do(t, newRequest(t, http.MethodPost, dead.URL+"/v1/chat/completions", "{}"))
	if status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502: %s", status, raw)
	}
	openAIShape("api_error", "upstream_unreachable")(t, raw)
	if p.admitter.State().InFlight["bulk"] != 0 || dead.admitter.State().InFlight["bulk"] != 0 {
		t.Error("a slot leaked after an upstream failure")
	}
}
