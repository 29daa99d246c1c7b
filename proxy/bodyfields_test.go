package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// tallyUpstream answers 200 and counts the requests it got.
func tallyUpstream(n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
}

// TestBodyFieldsRefused: a body the proxy and the provider could read
// differently is refused before admission, in the provider's error shape,
// with the field named and the refusal counted; it never reaches the
// upstream (issue 21, items 2 and 7).
func TestBodyFieldsRefused(t *testing.T) {
	var got atomic.Int64
	p := newTestProxy(t, proxyOpts{upstream: tallyUpstream(&got)})
	tests := []struct {
		name, path, body, contentType, encoding string
		status                                  int
		reason, mentions                        string
	}{
		{"repeated model", "/v1/chat/completions", `{"model":"gpt-4o-mini","model":"gpt-4o"}`, "", "", 400, "duplicate_key", `"model"`},
		{"escaped repeat", "/v1/chat/completions", `{"model":"a","m\u006fdel":"b"}`, "", "", 400, "duplicate_key", `"model"`},
		{"repeat in another case", "/v1/chat/completions", `{"model":"a","MODEL":"b"}`, "", "", 400, "duplicate_key", `"model"`},
		{"repeated max_tokens", "/v1/messages", `{"max_tokens":1,"max_tokens":8000}`, "", "", 400, "duplicate_key", `"max_tokens"`},
		{"repeated service_tier", "/v1/chat/completions", `{"service_tier":"flex","service_tier":"priority"}`, "", "", 400, "duplicate_key", `"service_tier"`},
		{"max_tokens as a string", "/v1/chat/completions", `{"max_tokens":"8000"}`, "", "", 400, "bad_request", `"max_tokens" must be a number`},
		{"n as a string", "/v1/chat/completions", `{"n":"8"}`, "", "", 400, "bad_request", `"n" must be a number`},
		{"stream as a string", "/v1/chat/completions", `{"stream":"true"}`, "", "", 400, "bad_request", `"stream" must be true or false`},
		{"byte order mark", "/v1/chat/completions", "\xEF\xBB\xBF{}", "", "", 400, "bad_request", "byte order mark"},
		{"utf-16", "/v1/chat/completions", "{\x00}\x00", "", "", 400, "bad_request", "byte order mark"},
		{"gzip", "/v1/chat/completions", "\x1f\x8b\x08\x00", "", "gzip", 415, "unsupported_encoding", "Content-Encoding"},
		{"br after identity", "/v1/embeddings", "{}", "", "identity, br", 415, "unsupported_encoding", "Content-Encoding"},
		{"two form models", "/v1/audio/transcriptions", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n" +
			"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n--b--\r\n", "multipart/form-data; boundary=b", "", 400, "duplicate_key", `"model"`},
		{"unfinished form", "/v1/audio/transcriptions", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1", "multipart/form-data; boundary=b", "", 400, "bad_request", "form"},
		{"two urlencoded models", "/v1/audio/transcriptions", "model=a&model=b", "application/x-www-form-urlencoded", "", 400, "duplicate_key", `"model"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := got.Load()
			req := newRequest(t, http.MethodPost, p.URL+tt.path, tt.body)
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			status, _, raw := do(t, req)
			message := errorMessage(t, raw, strings.HasPrefix(tt.path, "/v1/messages"))
			if status != tt.status || !strings.Contains(message, tt.mentions) {
				t.Errorf("%d %s, want %d naming %s", status, raw, tt.status, tt.mentions)
			}
			if got.Load() != before {
				t.Error("the body reached the upstream")
			}
			if n := metricValue(t, p.reg, "meterproxy_refusals_total", map[string]string{"pool": "none", "reason": tt.reason}); n < 1 {
				t.Errorf("meterproxy_refusals_total{reason=%q} = %v", tt.reason, n)
			}
		})
	}
}

// errorMessage is the message of an error body in OpenAI's shape, or
// Anthropic's when anthropic.
func errorMessage(t *testing.T, raw []byte, anthropic bool) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error body %q: %v", raw, err)
	}
	if anthropic != (e.Type == "error") {
		t.Errorf("error body %s in the wrong provider's shape", raw)
	}
	return e.Error.Message
}

// TestBodyFieldsAccepted: what providers take goes through: keys repeated
// only below the top level, a form with one model, identity encoding,
// numbers in any JSON spelling, a body that is not JSON at all.
func TestBodyFieldsAccepted(t *testing.T) {
	var got atomic.Int64
	p := newTestProxy(t, proxyOpts{upstream: tallyUpstream(&got)})
	for _, tt := range []struct{ body, contentType, encoding string }{
		{`{"model":"m","messages":[{"model":"x"},{"model":"y"}],"metadata":{"n":1,"n":2}}`, "", ""},
		{`{"model":"m","max_tokens":1e3,"n":null,"stream":null}`, "application/json", "identity"},
		{`{"model":"m","extra":1,"extra":2}`, "", ""},
		{"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--b--\r\n",
			"multipart/form-data; boundary=b", ""},
		{`not json`, "text/plain", ""},
	} {
		status, _, raw := do(t, func() *http.Request {
			req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", tt.body)
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			return req
		}())
		if status != http.StatusOK {
			t.Errorf("%q: %d %s, want it forwarded", tt.body, status, raw)
		}
	}
	if got.Load() != 5 {
		t.Errorf("the upstream got %d requests, want 5", got.Load())
	}
}

// TestLongContext: an anthropic-beta header naming the context-1m beta,
// among others or alone, in any case, asks for the long context; other
// betas and no header do not.
func TestLongContext(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values []string
		want   bool
	}{
		{"none", nil, false},
		{"the beta", []string{"context-1m-2025-08-07"}, true},
		{"among others", []string{"prompt-caching-2024-07-31, context-1m-2025-08-07"}, true},
		{"a second header", []string{"files-api-2025-04-14", "Context-1M-2025-08-07"}, true},
		{"other betas", []string{"files-api-2025-04-14,interleaved-thinking-2025-05-14"}, false},
		{"a prefix of it", []string{"context-1"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("anthropic-beta", v)
			}
			if got := longContext(h); got != tt.want {
				t.Errorf("longContext(%q) = %v, want %v", tt.values, got, tt.want)
			}
		})
	}
}
