//go:build faults

package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// leaveAtRandom sends n clients to p that all go away before their answer
// is whole, at random points, and returns what they saw:
//
//   - a tenth leave mid-upload: headers and part of the body, then the
//     connection closes;
//   - three tenths stream (bulk) and leave after 1 to 10 events, mid-stream;
//   - the rest (interactive) ask for an answer the upstream holds back for
//     a minute (X-Fake-Latency), so each is queued or waiting on the
//     upstream; once p has every one of them (its interactive queue and in
//     flight add up to their number) each leaves at a random moment within
//     2 s, queued or mid-request.
//
// p's upstream must be the fake provider streaming 40 chunks: each stream
// stalls after them (X-Fake-Stall-After) until its client leaves, so the
// proxy sees every stream cut short by its client, however late a loaded
// machine lets the client read. p must
// let its clients wait longer than all this takes (max_wait, an upstream
// timeout over a minute) and serve no one else, so its gauges count these
// clients only.
func leaveAtRandom(t *testing.T, client *http.Client, p *procs.Proxy, n int, rng *rand.Rand) (tl *tally, streams int) {
	t.Helper()
	uploads := n / 10
	streams = 3 * n / 10
	waiters := n - uploads - streams
	tl = newTally()
	var wg sync.WaitGroup
	leave := make([]chan struct{}, waiters)
	for i := range waiters {
		leave[i] = make(chan struct{})
		s := shot{url: p.URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{
			"Authorization": "Bearer " + chatKey, "X-Fake-Latency": "60s"}}
		wg.Go(func() { tl.record(fire(client, s, leave[i])) })
	}
	for range streams {
		// The stream stalls after its content, so it is still going when
		// its client leaves however late the client reads: a starved
		// client reading its 10th event after the whole stream had gone
		// into the sockets made the proxy see it end whole (296 of 300
		// cuts seen under load).
		s := shot{url: p.URL + "/v1/chat/completions", body: streamBody, headers: map[string]string{
			"Authorization": "Bearer " + importKey, "X-Fake-Stall-After": "40"}, leaveAfter: 1 + rng.IntN(10)}
		wg.Go(func() { tl.record(fire(client, s, nil)) })
	}
	addr := strings.TrimPrefix(p.URL, "http://")
	for range uploads {
		cut := rng.IntN(len(uploadBody))
		wg.Go(func() { tl.record(uploadAndLeave(addr, cut)) })
	}
	waitFor(t, fmt.Sprintf("the proxy to hold all %d waiting clients (queued or upstream)", waiters), func() bool {
		m := scrape(t, p.AdminURL)
		in := map[string]string{"class": "interactive"}
		return m.Sum("meterproxy_queue_depth", in)+m.Sum("meterproxy_in_flight", in) == float64(waiters)
	})
	for i := range waiters {
		d := time.Duration(rng.Int64N(int64(2 * time.Second)))
		time.AfterFunc(d, func() { close(leave[i]) })
	}
	wg.Wait()
	return tl, streams
}

// uploadBody is the body a client leaving mid-upload announces in full and
// sends only part of.
var uploadBody = `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`

// uploadAndLeave sends a request's headers and the first cut bytes of its
// body, then closes the connection.
func uploadAndLeave(addr string, cut int) answer {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return answer{err: err}
	}
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, chatKey, len(uploadBody), uploadBody[:cut])
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return answer{err: err}
	}
	return answer{err: errLeft, left: true}
}

// TestFaultClientsLeave: 1,000 clients go away at random points — while
// queued, while the upstream works on their request, mid-upload and
// mid-stream. Every one that left before an answer is counted cancelled,
// every stream they left is counted forwarded and cut short by the client;
// nothing is left in flight or queued and the proxy's goroutines return to
// idle.
func TestFaultClientsLeave(t *testing.T) {
	fake := startFake(t, "-latency", "0s", "-chunks", "40", "-chunk-interval", "25ms")
	cfg := baseConfig(fake.URL)
	cfg.withCallers()
	cfg.set("account.requests_per_minute", 600_000)
	cfg.set("account.max_in_flight", 150) // so most waiting clients are queued
	cfg.set("classes.interactive.max_wait", "60s")
	cfg.set("classes.bulk.max_wait", "60s")
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	idle := readIdle(t, p.AdminURL)
	client := loadClient(t, 1024)

	tl, streams := leaveAtRandom(t, client, p, 1000, seeded(t, 7))
	r := checkIdentityOf(t, "proxy", p.AdminURL, tl, idle)
	if tl.forwarded["2xx"] != streams || tl.cutClient != streams {
		t.Errorf("%d streams: %s; want each forwarded and left by its client", streams, tl)
	}
	if int(r.cutClient) != streams {
		t.Errorf("meterproxy_responses_cut_short_total{side=client} %v, want %d", r.cutClient, streams)
	}
	m := scrape(t, p.AdminURL)
	queued := m.Sum("meterproxy_admissions_total", map[string]string{"outcome": "cancelled"})
	t.Logf("of %d that left before an answer, %v left while queued, the rest mid-request or mid-upload", tl.cancelled, queued)
	if queued == 0 {
		t.Error("no client left while queued")
	}
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "proxy", p, idle)
}
