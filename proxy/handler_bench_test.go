package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// benchReply is a small chat completion with usage, as a provider sends.
const benchReply = `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":7,"total_tokens":21}}`

const benchRequest = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}`

// benchUpstream answers every request with benchReply.
var benchUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(benchReply))
})

// BenchmarkHandler is one request through meterproxy's handler (classify,
// admit, forward, meter) beside the same request through a plain
// httputil.ReverseProxy, both called directly against one in-process
// upstream. make bench reads B/op and allocs/op of both; the difference
// is what meterproxy adds per request.
func BenchmarkHandler(b *testing.B) {
	run := func(b *testing.B, h http.Handler, target string) {
		b.Helper()
		b.ReportAllocs()
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, target+"/v1/chat/completions", bytes.NewReader([]byte(benchRequest)))
			req.Header.Set("Authorization", "Bearer sk-bench")
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	}
	meterproxy := func(b *testing.B, access *AccessLog) {
		p := newTestProxy(b, proxyOpts{upstream: benchUpstream, environ: map[string]string{"BENCH_KEY": "sk-bench"}, access: access,
			mutate: func(_ *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
				q.Account.RequestsPerMinute, q.Account.MaxInFlight = 60_000_000, 4096
				*callers = []classify.Caller{{Name: "bench", KeyEnv: "BENCH_KEY", Class: classify.Bulk}}
			}})
		run(b, p.handler, "http://meterproxy")
	}
	b.Run("meterproxy", func(b *testing.B) { meterproxy(b, nil) })
	// The access log written to a file: what a request's line costs the
	// handler (the record sent; its encoding and write on the writer's
	// goroutine count too, in the same process).
	b.Run("meterproxy-access-log", func(b *testing.B) {
		access, err := OpenAccessLog(filepath.Join(b.TempDir(), "access.log"), io.Discard, io.Discard, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		meterproxy(b, access)
		b.StopTimer()
		if err := access.Close(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		up := httptest.NewServer(benchUpstream)
		b.Cleanup(up.Close)
		target, _ := url.Parse(up.URL)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		b.Cleanup(tr.CloseIdleConnections)
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: tr}
		run(b, rp, "http://baseline")
	})
	// The floor: the same request sent by the transport alone and its
	// answer copied to the recorder, no proxy in between — what the
	// harness, net/http's client and the upstream cost every column.
	b.Run("floor", func(b *testing.B) {
		up := httptest.NewServer(benchUpstream)
		b.Cleanup(up.Close)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		b.Cleanup(tr.CloseIdleConnections)
		run(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			out, err := http.NewRequestWithContext(r.Context(), r.Method, up.URL+r.URL.Path, r.Body) //nolint:gosec // the benchmark's own upstream
			if err != nil {
				b.Fatal(err)
			}
			out.Header = r.Header
			resp, err := tr.RoundTrip(out)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
		}), "http://floor")
	})
}
