package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// writeCounter is an upstream connection that counts its writes.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestRequestGoesUpstreamInOneWrite: a forwarded request's head and its
// body, both in memory, leave in one write on the upstream connection,
// not the head flushed first and the body after (net/http does that for a
// body it does not know is in memory, as ReverseProxy's wrapper of it is).
func TestRequestGoesUpstreamInOneWrite(t *testing.T) {
	var writes atomic.Int64
	var dialer net.Dialer
	var bodies atomic.Int64
	p := newTestProxy(t, proxyOpts{
		upstream: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if b, err := io.ReadAll(r.Body); err == nil && string(b) == benchRequest {
				bodies.Add(1)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
		}),
		environ: map[string]string{"K": "sk-one-write"},
		mutate: func(_ *Config, _ *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			*callers = []classify.Caller{{Name: "c", KeyEnv: "K", Class: classify.Interactive}}
		},
		dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return writeCounter{Conn: c, writes: &writes}, nil
		},
	})
	const n = 5
	for i := range n {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(benchRequest))
		req.Header.Set("Authorization", "Bearer sk-one-write")
		req.Header.Set("Content-Type", "application/json")
		if status, _, body := do(t, req); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
		if got := writes.Load(); got != int64(i+1) {
			t.Fatalf("after %d requests the upstream connections saw %d writes, want %d (one a request)", i+1, got, i+1)
		}
	}
	if got := bodies.Load(); got != n {
		t.Fatalf("the upstream read %d whole bodies, want %d", got, n)
	}
}
