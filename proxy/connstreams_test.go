package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/h2craw"
)

// TestUnknownCallerStreamsPerConnection: on one h2c connection an unknown
// caller (unknown_callers: forward) may have server.max_unknown_caller_streams
// (here 2) requests in progress; the third gets 429 too_many_streams at
// once, while a configured caller's request on the same connection, and
// an unknown caller's on another connection, go through (issue 32 item 1).
func TestUnknownCallerStreamsPerConnection(t *testing.T) {
	var arrived atomic.Int32
	release := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	p := newTestProxy(t, proxyOpts{upstream: up, environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(c *Config, _ *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			c.Server.MaxUnknownCallerStreams = 2
			cc.UnknownCallers = classify.UnknownForward
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
	cfg := DefaultServerConfig()
	cfg.MaxUnknownCallerStreams = 2
	addr := serveProxy(t, p, cfg)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the upstream closes

	dial := func() *h2craw.Conn {
		c, err := h2craw.Dial(addr, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	post := func(c *h2craw.Conn, key string) uint32 {
		id, err := c.Post(addr, "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key,
			"Content-Type": "application/json"}, []byte(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	c := dial()
	first, second := post(c, "sk-stranger"), post(c, "sk-stranger")
	waitFor(t, "two unknown streams upstream", func() bool { return arrived.Load() == 2 })
	third := post(c, "sk-stranger")
	waitFor(t, "the third unknown stream answered", func() bool { return c.Stream(third).Status != 0 })
	if s := c.Stream(third).Status; s != http.StatusTooManyRequests {
		t.Errorf("the third unknown stream: %d, want 429", s)
	}
	waitFor(t, "meterproxy_refusals_total{reason=too_many_streams} at 1", func() bool {
		return counterValue(t, p.reg, "meterproxy_refusals_total", map[string]string{"class": "bulk", "account": poolNone, "reason": reasonTooManyStreams}) == 1
	})
	known := post(c, "sk-import")
	post(dial(), "sk-stranger")
	waitFor(t, "the configured caller's stream and the other connection's upstream", func() bool { return arrived.Load() == 4 })
	releaseOnce.Do(func() { close(release) })
	for _, id := range []uint32{first, second, known} {
		waitFor(t, "the held streams answered", func() bool { return c.Stream(id).Ended })
		if s := c.Stream(id).Status; s != http.StatusOK {
			t.Errorf("stream %d: %d, want 200", id, s)
		}
	}
}
