package test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/h2craw"
	"github.com/meterproxy/meterproxy/test/procs"
)

// The slow clients of issue 32 item 1, through the built binary: clients
// that never read their answers beside good bulk traffic, in the knee
// setup (a server of 8 slots at 200 ms).

const (
	// slowKey is the key of the caller whose clients never read.
	slowKey = "sk-e2e-slow-reader-ccccccccccccccc"
	// slowMemory is the test's server.max_body_memory_bytes: at most
	// half of it holds answers read ahead.
	slowMemory = 96 << 20
	// slowStall is the test's server.write_stall_timeout.
	slowStall = 5 * time.Second
)

// slowChatBody asks for a chat completion.
const slowChatBody = `{"model":"m","messages":[{"role":"user","content":"write"}]}`

// goodLoad runs workers closed-loop bulk clients of key against url until
// ctx ends, each reading its whole answer, and counts the 200s.
func goodLoad(ctx context.Context, t *testing.T, url, key string, workers int) (ok *atomic.Int64, wait func()) {
	ok = new(atomic.Int64)
	client := newClient(t, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(slowChatBody))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					continue
				}
				_, err = io.Copy(io.Discard, res.Body)
				if res.Body.Close() == nil && err == nil && res.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		})
	}
	return ok, wg.Wait
}

// rate is what n gains a second over the next d.
func rate(n *atomic.Int64, d time.Duration) float64 {
	before, start := n.Load(), time.Now()
	<-time.After(d) // the length of a measurement, not a synchronisation
	return float64(n.Load()-before) / time.Since(start).Seconds()
}

// withBigAnswers is next, but a request with key is answered at once a
// chat completion of the size its X-Fake-Reply-Bytes asks (8 MB or 2 MB),
// built once: the fake provider pads an answer that large a word at a
// time, seconds of this (race-instrumented) process's CPU each.
func withBigAnswers(next http.Handler, key string) http.Handler {
	answers := map[string][]byte{}
	for _, n := range []int{8_000_000, 2_000_000} {
		answers[fmt.Sprint(n)] = fmt.Appendf(nil, `{"id":"chatcmpl-big","object":"chat.completion","model":"m","choices":[{"index":0,`+
			`"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`,
			strings.Repeat("x", n), n/4, n/4+12)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := answers[r.Header.Get(fakeprovider.HeaderReplyBytes)]
		if r.Header.Get("Authorization") != "Bearer "+key || !ok {
			next.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = w.Write(b)
	})
}

// neverRead opens clients that never read an answer of replyBytes, with
// key: http1 over HTTP/1.1 (a small receive buffer each) and h2 streams
// on one h2c connection with a window of zero. They close at cleanup.
func neverRead(t *testing.T, proxyURL, key string, http1, h2 int, replyBytes int) {
	t.Helper()
	addr := strings.TrimPrefix(proxyURL, "http://")
	for range http1 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\n%s: %d\r\nContent-Length: %d\r\n\r\n%s",
			addr, key, fakeprovider.HeaderReplyBytes, replyBytes, len(slowChatBody), slowChatBody); err != nil {
			t.Fatal(err)
		}
	}
	if h2 == 0 {
		return
	}
	c, err := h2craw.Dial(addr, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for range h2 {
		if _, err := c.Post(addr, "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key,
			"Content-Type": "application/json", fakeprovider.HeaderReplyBytes: fmt.Sprint(replyBytes / 4)}, []byte(slowChatBody)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSlowClientsKeepNoSlots: a server of 8 slots at 200 ms behind a
// static bound of 16, 40 closed-loop bulk workers. 16 clients that never
// read — 8 over HTTP/1.1 asking 8 MB answers, 8 h2c streams with a zero
// window asking 2 MB — hold no slot: their caller's in-flight count drops
// to 0 while they stay, good throughput during the stall is at least half
// of before, the body memory gauge never passes server.max_body_memory_bytes
// and resident memory grows by less than twice it plus 64 MiB (the
// container budget of docs/security.md); past server.write_stall_timeout every one
// is cut off and nothing is left in flight. Before, they held 16 of the 16
// slots and good throughput went to 0 for as long as they stayed (issue 32
// item 1).
func TestSlowClientsKeepNoSlots(t *testing.T) {
	p := slowReadersProxy(t, func(cfg config) { cfg.set("account.max_in_flight", 16) })
	ctx, cancel := context.WithCancel(t.Context())
	ok, wait := goodLoad(ctx, t, p.URL, importKey, 40)
	defer wait()
	defer cancel()

	waitFor(t, "the good load under way", func() bool { return ok.Load() >= 40 })
	before := rate(ok, 3*time.Second)
	base := vmRSS(t, p.Pid())
	var peakGauge, peakRSS atomic.Int64
	watch, watched := context.WithCancel(ctx)
	var watcher sync.WaitGroup
	watcher.Go(func() { watchMemory(watch, p.AdminURL, p.Pid(), &peakGauge, &peakRSS) })
	defer watcher.Wait()
	defer watched()

	stalled := time.Now()
	neverRead(t, p.URL, slowKey, 8, 8, 8_000_000)
	during := rate(ok, 4*time.Second)
	if during < before/2 {
		t.Errorf("good throughput %.1f/s during the stall, want at least half of %.1f/s", during, before)
	}
	slow := map[string]string{"caller": "slow-reader"}
	waitFor(t, "the slow readers admitted and their slots given back while they stay", func() bool {
		m := scrape(t, p.AdminURL)
		return sum(m, "meterproxy_caller_admissions_total", slow) == 16 && sum(m, "meterproxy_caller_in_flight", slow) == 0
	})
	cut := map[string]string{"side": "client"}
	waitFor(t, "every slow reader cut off", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_responses_cut_short_total", cut) == 16
	})
	watched()
	watcher.Wait()
	t.Logf("good completions %.1f/s before, %.1f/s with 16 clients that never read; all cut off %.1f s after they came; "+
		"body memory peak %.1f MiB of %d; resident memory %.1f MiB, peak %.1f MiB",
		before, during, time.Since(stalled).Seconds(), mib(peakGauge.Load()), slowMemory>>20, mib(base), mib(peakRSS.Load()))
	if limit := int64(slowMemory/2 + 1<<20); peakGauge.Load() > limit {
		t.Errorf("meterproxy_body_memory_bytes peaked at %.1f MiB, want at most half of server.max_body_memory_bytes (answers read ahead) and 1 MiB of request bodies: %.1f MiB",
			mib(peakGauge.Load()), mib(limit))
	}
	if growth, limit := peakRSS.Load()-base, int64(2*slowMemory+64<<20); growth > limit {
		t.Errorf("resident memory grew by %.1f MiB, want at most %.1f MiB", mib(growth), mib(limit))
	}
	if !strings.Contains(p.Logs(), `"msg":"client_cut"`) {
		t.Error("no client_cut line in the log")
	}
}

// watchMemory records the peaks of meterproxy_body_memory_bytes and the
// process's resident memory until ctx ends.
func watchMemory(ctx context.Context, adminURL string, pid int, gauge, rss *atomic.Int64) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, err := procs.Scrape(ctx, adminURL); err == nil {
			gauge.Store(max(gauge.Load(), int64(sum(m, "meterproxy_body_memory_bytes", nil))))
		}
		if n, err := residentBytes(pid); err == nil {
			rss.Store(max(rss.Load(), n))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// slowReadersProxy starts a proxy in front of a knee server (8 slots at
// 200 ms) that answers slowKey's requests with big answers, with
// nightly-import and slow-reader as bulk callers, the body memory budget
// slowMemory and the write stall timeout slowStall; bound sets its
// in-flight bound.
func slowReadersProxy(t *testing.T, bound func(config)) *procs.Proxy {
	t.Helper()
	fake := fakeprovider.New(fakeprovider.Config{Latency: 200 * time.Millisecond, Slots: 8, NoLog: true})
	up := startUpstream(t, withBigAnswers(fake, slowKey))
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("callers", []map[string]any{
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"},
		{"name": "slow-reader", "key_env": "SLOW_KEY", "class": "bulk"},
	})
	cfg.set("account.requests_per_minute", 6_000_000)
	bound(cfg)
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.set("server.max_body_memory_bytes", slowMemory)
	cfg.set("server.write_stall_timeout", slowStall.String())
	return startProxy(t, cfg, append(fleetEnv, "SLOW_KEY="+slowKey), importKey, slowKey)
}
