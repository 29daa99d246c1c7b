package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestStreamKeepAlivesPassAndCountNothing: a provider that queues a stream
// behind SSE comments and empty lines (DeepSeek's ": keep-alive") has them
// passed to the client as sent, counted as no output, and the stream
// metered at the usage it reported (issue 36 item 3).
func TestStreamKeepAlivesPassAndCountNothing(t *testing.T) {
	const keepAlives = ": keep-alive\n\n: keep-alive\n\n\n\n: keep-alive\n\n"
	p := newTestProxy(t, proxyOpts{upstream: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, part := range []string{keepAlives,
			`data: {"id":"c","object":"chat.completion.chunk","model":"deepseek-chat","choices":[{"index":0,"delta":{"content":"Hello"}}]}` + "\n\n",
			`data: {"id":"c","object":"chat.completion.chunk","model":"deepseek-chat","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29}}` + "\n\n",
			"data: [DONE]\n\n"} {
			_, _ = w.Write([]byte(part))
			f.Flush()
		}
	})})
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions",
		`{"model":"deepseek-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	status, _, body := do(t, req)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if !strings.HasPrefix(string(body), keepAlives) {
		t.Errorf("the client got %q, want the keep-alives first, as sent", body)
	}
	waitFor(t, "the stream settled", func() bool {
		return sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": "output"}) > 0
	})
	for _, c := range []struct {
		kind, estimated string
		want            float64
	}{{"input", "false", 19}, {"output", "false", 10}, {"input", "true", 0}, {"output", "true", 0}} {
		if got := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"kind": c.kind, "estimated": c.estimated}); got != c.want {
			t.Errorf("meterproxy_tokens_total{kind=%q,estimated=%q} = %v, want %v", c.kind, c.estimated, got, c.want)
		}
	}
}
