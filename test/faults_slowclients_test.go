//go:build faults

package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/h2craw"
	"github.com/meterproxy/meterproxy/test/procs"
)

// errStreamReset is what a client that never read saw of its h2c stream
// when the proxy cut it off.
var errStreamReset = errors.New("the proxy reset the stream")

// slowHTTP1 is a client that sent its request over HTTP/1.1 and reads
// nothing until answer is called.
type slowHTTP1 struct{ c net.Conn }

// sendSlowHTTP1 sends a chat request with key asking replyBytes of answer
// and reads nothing. (Its receive buffer is left as the system sets it: a
// small one would take the test minutes to read the answer through at the
// end.)
func sendSlowHTTP1(addr, key string, replyBytes int) (*slowHTTP1, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\n%s: %d\r\nContent-Length: %d\r\n\r\n%s",
		addr, key, fakeprovider.HeaderReplyBytes, replyBytes, len(chatBody), chatBody)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &slowHTTP1{c: c}, nil
}

// answer reads, at last, what the proxy left in the connection: the
// whole answer, or the part of it written before the proxy cut the client
// off (then the body fails, and it counts as the client's cut).
func (s *slowHTTP1) answer() answer {
	defer func() { _ = s.c.Close() }()
	_ = s.c.SetReadDeadline(time.Now().Add(hangLimit))
	res, err := http.ReadResponse(bufio.NewReader(s.c), nil)
	if err != nil {
		return answer{err: err}
	}
	defer func() { _ = res.Body.Close() }()
	a := answer{status: res.StatusCode, header: res.Header}
	a.body, a.err = io.ReadAll(res.Body)
	a.left = a.err != nil // it never read: the cut is its side's
	return a
}

// slowH2 is an h2c connection with a window of zero and its streams.
type slowH2 struct {
	c   *h2craw.Conn
	ids []uint32
}

// answers are what the connection's streams saw: each a status and, cut
// off by the proxy, a reset (the client's side). A refusal cannot be read
// through a window of zero, so any status but 200 is a problem the rules
// report.
func (s *slowH2) answers() []answer {
	var out []answer
	for _, id := range s.ids {
		st := s.c.Stream(id)
		switch {
		case st.Status == 0:
			out = append(out, answer{err: fmt.Errorf("stream %d: no headers (reset %v, %v)", id, st.WasReset, st.Reset)})
		case st.WasReset:
			out = append(out, answer{status: st.Status, header: http.Header{}, err: errStreamReset, left: true})
		case st.Ended:
			out = append(out, answer{status: st.Status, header: http.Header{}})
		default:
			out = append(out, answer{status: st.Status, header: http.Header{}, err: errors.New("the stream is still open"), hung: true})
		}
	}
	_ = s.c.Close()
	return out
}

// TestFaultSlowClients: clients that never read, at volume and on both
// protocols, beside good traffic (issue 32 item 1) — 40 over HTTP/1.1
// asking 8 MB answers (more than the socket buffers hold), 200 h2c
// streams on 10 connections with a window of zero — while 150 good
// requests a second (bulk and interactive) run. The proxy has a 64 MiB
// body memory budget (32 MiB for answers read ahead: far less than the
// slow readers' answers) and a 2 s write_stall_timeout. Every slow reader
// is cut off, by the stall or for memory; the identity holds exactly, the
// cuts by the client included; the good traffic is served; and once the
// slow readers are cut, nothing is left in flight or queued.
func TestFaultSlowClients(t *testing.T) {
	const http1, h2Conns, h2Streams = 40, 10, 20
	fake := startFake(t, "-latency", "50ms", "-slots", "32")
	front := startUpstream(t, withBigAnswers(httputil.NewSingleHostReverseProxy(mustURL(t, fake.URL)), slowKey))
	cfg := baseConfig(front.URL)
	cfg.set("callers", []map[string]any{
		{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"},
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"},
		{"name": "slow-reader", "key_env": "SLOW_KEY", "class": "bulk"},
	})
	cfg.set("account.requests_per_minute", 600_000)
	cfg.set("account.max_in_flight", 60)
	cfg.set("classes.interactive.max_wait", "60s")
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.set("server.max_body_memory_bytes", 64<<20)
	cfg.set("server.write_stall_timeout", "2s")
	p := startProxy(t, cfg, append(fleetEnv, "SLOW_KEY="+slowKey), chatKey, importKey, slowKey)
	idle := readIdle(t, p.AdminURL)
	addr := strings.TrimPrefix(p.URL, "http://")
	l := newLedger()
	client := loadClient(t, 256)
	rng := seeded(t, 32)

	ctx, stop := context.WithCancel(t.Context())
	good := &loader{client: client, rate: 150, maxConc: 200, next: func(rng *rand.Rand) (shot, *tally) {
		key := importKey
		if rng.IntN(3) == 0 {
			key = chatKey
		}
		return shot{url: p.URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{"Authorization": "Bearer " + key}},
			l.of("proxy", "good")
	}}
	var running sync.WaitGroup
	running.Go(func() { good.run(ctx, rng) })

	var slow1 []*slowHTTP1
	for range http1 {
		s, err := sendSlowHTTP1(addr, slowKey, 8_000_000)
		if err != nil {
			t.Fatal(err)
		}
		slow1 = append(slow1, s)
	}
	var slow2 []*slowH2
	for range h2Conns {
		c, err := h2craw.Dial(addr, false)
		if err != nil {
			t.Fatal(err)
		}
		s := &slowH2{c: c}
		for range h2Streams {
			id, err := c.Post(addr, "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + slowKey,
				"Content-Type": "application/json"}, []byte(chatBody))
			if err != nil {
				t.Fatal(err)
			}
			s.ids = append(s.ids, id)
		}
		slow2 = append(slow2, s)
	}
	total := float64(http1 + h2Conns*h2Streams)
	slow := map[string]string{"caller": "slow-reader"}
	waitForLong(t, "every slow reader's request ended at the proxy", func(m procs.Metrics) bool {
		return sum(m, "meterproxy_requests_total", slow) == total
	}, p.AdminURL)
	stop()
	running.Wait()

	var reading sync.WaitGroup
	for _, s := range slow1 {
		reading.Go(func() { l.of("proxy", "slow HTTP/1.1").record(s.answer()) })
	}
	reading.Wait()
	for _, s := range slow2 {
		for _, a := range s.answers() {
			l.of("proxy", "slow h2c").record(a)
		}
	}
	tl := l.proxy("proxy")
	r := checkIdentityOf(t, "proxy", p.AdminURL, tl, idle)
	if n := int(r.cutClient - idle.cutClient); n != tl.cutClient {
		t.Errorf("meterproxy_responses_cut_short_total{side=client} %d, the clients saw %d cut", n, tl.cutClient)
	}
	rule := kindRule{forwarded: []string{"2xx"}, must: "2xx"}
	checkRules(t, l, map[string]kindRule{"good": rule, "slow HTTP/1.1": rule, "slow h2c": rule})
	for kind, n := range map[string]int{"slow h2c": h2Conns * h2Streams, "slow HTTP/1.1": http1} {
		if tl := l.kind(kind); tl.cutClient != n {
			t.Errorf("%s: %s; want every one cut off", kind, tl)
		}
	}
	// The h2c streams' answers are small, read ahead whole: only the stall
	// cuts them. The HTTP/1.1 answers outgrow the memory for answers read
	// ahead, which cuts a client that takes nothing for a second.
	stalled := strings.Count(p.Logs(), `"msg":"client_cut","reason":"write_stalled"`)
	starved := strings.Count(p.Logs(), `"msg":"client_cut","reason":"body_memory"`)
	t.Logf("good traffic: %d sent, %d skipped (all %d busy); slow readers cut: %d write_stalled, %d body_memory",
		good.sent.Load(), good.skipped.Load(), good.maxConc, stalled, starved)
	if stalled < h2Conns*h2Streams || starved == 0 || stalled+starved != tl.cutClient {
		t.Errorf("client_cut logged %d write_stalled and %d body_memory, want the %d h2c streams stalled, some HTTP/1.1 answers starved, %d in all",
			stalled, starved, h2Conns*h2Streams, tl.cutClient)
	}
	client.CloseIdleConnections()
	front.Close() // the proxy's connections to the upstream close with it
	fake.stop(t)
	checkIdle(t, "proxy", p, idle)
}

// mustURL parses raw.
func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitForLong polls adminURL's metrics until cond holds, for as long as a
// fault case may take (hangLimit), failing the test past it.
func waitForLong(t *testing.T, what string, cond func(procs.Metrics) bool, adminURL string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(hangLimit)
	for {
		if m, err := procs.Scrape(t.Context(), adminURL); err == nil && cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
