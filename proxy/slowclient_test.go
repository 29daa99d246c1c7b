package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/prometheus/client_golang/prometheus"
)

// The slow clients of issue 32 item 1: a client that never reads held its
// request's slot, caps and budget reservation until its answer was read,
// and there was no write timeout.

// bigAnswer answers every request with a chat completion of size bytes of
// text, as JSON or, for a request that asks to stream, as an event stream
// of 16 KiB chunks; either reports 10 input and 1000 output tokens.
func bigAnswer(size int) http.Handler {
	text := strings.Repeat("x", size)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q}}],`+
				`"usage":{"prompt_tokens":10,"completion_tokens":1000}}`, text)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < size; i += 16 << 10 {
			_, _ = fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n",
				text[i:min(i+16<<10, size)])
		}
		_, _ = io.WriteString(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1000}}\n\ndata: [DONE]\n\n")
	})
}

// slowClientProxy is a proxy in front of up with a configured bulk caller
// "import" (key sk-import), gpt-4o priced and that caller's budget $1 a
// day; mutate changes the server's configuration.
func slowClientProxy(t *testing.T, up http.Handler, mutate func(*ServerConfig)) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: up, environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(c *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			q.Prices = []price.Price{{Match: []string{"gpt-4o"}, Input: 2.5, Output: 10}}
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk,
				Budget: classify.Budget{USD: 1, Per: classify.PerDay}}}
			if mutate != nil {
				mutate(&c.Server)
			}
		}})
}

// slowChat asks gpt-4o for up to 20,000 tokens: $0.20 reserved.
const slowChat = `{"model":"gpt-4o","max_tokens":20000,"messages":[{"role":"user","content":"write"}]}`

// stuckWriter is a client that takes nothing until unblock closes: every
// write waits for it.
type stuckWriter struct {
	header  http.Header
	unblock chan struct{}
	wrote   atomic.Int64
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Flush()              {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	<-w.unblock
	w.wrote.Add(int64(len(b)))
	return len(b), nil
}

// TestSlotReleasedAtUpstreamEnd: while the client has taken nothing of a
// 4 MiB answer (its writer blocks), the request's slot and its caller's
// in-flight count are given back, its usage is settled on its budget
// (nothing left reserved) and its upstream time measured, all as the
// upstream's answer ends; the client then gets the answer whole. Before,
// all of it waited for the client (issue 32 item 1).
func TestSlotReleasedAtUpstreamEnd(t *testing.T) {
	const size = 4 << 20
	for _, tt := range []struct{ name, body string }{
		{"JSON", slowChat},
		{"event stream", strings.Replace(slowChat, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := slowClientProxy(t, bigAnswer(size), nil)
			w := &stuckWriter{header: http.Header{}, unblock: make(chan struct{})}
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/chat/completions", strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer sk-import")
			done := make(chan struct{})
			go func() { defer close(done); p.handler.ServeHTTP(w, req) }()
			release := sync.OnceFunc(func() { close(w.unblock) })
			defer func() { release(); <-done }() // a failing check would leave the handler stuck

			bulk := map[string]string{"class": "bulk"}
			waitFor(t, "the slot given back and the budget settled while the client has taken nothing", func() bool {
				return metricValue(t, p.reg, "meterproxy_in_flight", bulk) == 0 &&
					metricValue(t, p.reg, "meterproxy_caller_in_flight", map[string]string{"caller": "import"}) == 0 &&
					settled(p) && histogramCount(t, p.reg, "meterproxy_upstream_duration_seconds", bulk) == 1
			})
			select {
			case <-done:
				t.Fatal("the handler returned: the client was not held up")
			default:
			}
			if got := w.wrote.Load(); got != 0 {
				t.Fatalf("the client took %d bytes, want none yet", got)
			}
			release()
			<-done
			if got := w.wrote.Load(); got < size {
				t.Errorf("the client got %d bytes, want the whole answer (over %d)", got, size)
			}
			if n := counterValue(t, p.reg, "meterproxy_responses_cut_short_total", map[string]string{"class": "bulk", "side": "client"}); n != 0 {
				t.Errorf("%v responses cut by the client, want none", n)
			}
		})
	}
}

// settled reports whether caller:import's budget, as the budget gate last
// read it (once a second), has spent and holds nothing reserved.
func settled(p *testProxy) bool {
	for _, b := range p.admitter.State().Budgets {
		if b.Budget == "caller:import" {
			return b.Reserved == 0 && b.Spent > 0
		}
	}
	return false
}

// serveProxy runs p's handler behind NewServer (HTTP/1.1 and h2c) with
// cfg, and returns the proxy listener's address.
func serveProxy(t *testing.T, p *testProxy, cfg ServerConfig) string {
	t.Helper()
	cfg.ShutdownGrace = time.Second
	srv := NewServer(cfg, p.handler, Admin{Gatherer: prometheus.NewRegistry()}, slog.New(slog.DiscardHandler))
	var lc net.ListenConfig
	pl, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx, pl, al) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return pl.Addr().String()
}

// neverReadHTTP1 sends body to addr over HTTP/1.1 with key and reads
// nothing of the answer, its receive buffer small; the connection closes
// at cleanup.
func neverReadHTTP1(t *testing.T, addr, key, body string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body); err != nil {
		t.Fatal(err)
	}
}
