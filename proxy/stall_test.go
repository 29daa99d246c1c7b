package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/h2craw"
)

// TestStalledClientCut: a client that never reads an 8 MiB answer — over
// HTTP/1.1 with a small receive buffer, over h2c with a stream window of
// zero, there also a 100-byte one — gives its slot back as soon as the upstream's answer is in (read
// ahead), and is cut off server.write_stall_timeout (here 300 ms) after
// its last write went through: counted as cut by the client, logged
// client_cut write_stalled, its answer's memory given back. Before, its
// slot was held for as long as the client stayed (issue 32 item 1).
func TestStalledClientCut(t *testing.T) {
	neverReadH2 := func(t *testing.T, addr string) func() string {
		c, err := h2craw.Dial(addr, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		id, err := c.Post(addr, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-import",
			"Content-Type": "application/json"}, []byte(slowChat))
		if err != nil {
			t.Fatal(err)
		}
		return func() string {
			if s := c.Stream(id); s.Status != 200 || !s.WasReset || s.Received != 0 {
				return fmt.Sprintf("the stream: %+v, want status 200, reset, no body", s)
			}
			return ""
		}
	}
	for _, tt := range []struct {
		name string
		size int
		// send starts the client; the check it returns says what the
		// client saw once cut off ("" when right).
		send func(t *testing.T, addr string) (check func() string)
	}{
		{"HTTP/1.1", 8 << 20, func(t *testing.T, addr string) func() string {
			neverReadHTTP1(t, addr, "sk-import", slowChat)
			return func() string { return "" }
		}},
		{"h2c, window 0", 8 << 20, neverReadH2},
		// An answer net/http holds whole in its buffers once the handler
		// is done: still cut, and counted so (the final flush).
		{"h2c, window 0, small answer", 100, neverReadH2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := slowClientProxy(t, bigAnswer(tt.size), nil)
			p.handler.writeStall = 300 * time.Millisecond // injected: the configuration's least is 1 s
			check := tt.send(t, serveProxy(t, p, DefaultServerConfig()))
			waitFor(t, "the slot given back while the client reads nothing", func() bool {
				return histogramCount(t, p.reg, "meterproxy_upstream_duration_seconds", map[string]string{"class": "bulk"}) == 1 &&
					metricValue(t, p.reg, "meterproxy_in_flight", map[string]string{"class": "bulk"}) == 0 && settled(p)
			})
			cut := map[string]string{"class": "bulk", "side": "client"}
			waitFor(t, "the stalled client cut off", func() bool {
				return counterValue(t, p.reg, "meterproxy_responses_cut_short_total", cut) == 1
			})
			if !strings.Contains(p.logs.String(), `"msg":"client_cut","reason":"write_stalled","caller":"import"`) {
				t.Error("no client_cut write_stalled line in the log")
			}
			waitFor(t, "the client to see the cut", func() bool { return check() == "" })
			waitFor(t, "the answer's memory given back", func() bool { return p.handler.bodies.budget.inUse() == 0 })
		})
	}
}

// TestSlowClientCutForMemory: a client that never reads, when the body
// memory budget (256 KiB: 128 KiB for answers read ahead) cannot hold the
// rest of its answer, is cut off once it has taken nothing for the grace
// (here 50 ms), long before write_stall_timeout (30 s): its slot given
// back, counted as cut by the client, logged client_cut body_memory.
func TestSlowClientCutForMemory(t *testing.T) {
	p := slowClientProxy(t, bigAnswer(8<<20), func(c *ServerConfig) { c.MaxBodyBytes, c.MaxBodyMemoryBytes = 64<<10, 256<<10 })
	p.handler.aheadGrace = 50 * time.Millisecond
	neverReadHTTP1(t, serveProxy(t, p, DefaultServerConfig()), "sk-import", slowChat)
	waitFor(t, "the client cut off for memory", func() bool {
		return counterValue(t, p.reg, "meterproxy_responses_cut_short_total", map[string]string{"class": "bulk", "side": "client"}) == 1
	})
	if n := metricValue(t, p.reg, "meterproxy_in_flight", map[string]string{"class": "bulk"}); n != 0 {
		t.Errorf("in flight %v after the cut, want 0", n)
	}
	if !strings.Contains(p.logs.String(), `"msg":"client_cut","reason":"body_memory","caller":"import"`) {
		t.Error("no client_cut body_memory line in the log")
	}
	waitFor(t, "the answer's memory given back", func() bool { return p.handler.bodies.budget.inUse() == 0 })
}
