//go:build faults

package test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxBody is server.max_body_bytes in the bad-input cases.
const maxBody = 64 << 10

// rssGrowthBound is how much a proxy's resident memory may grow across a
// run once it has warmed up (pools filled, heap at its working size): a
// leak of even 1 KiB a request over the 13,000 requests of the bad-input
// case shows as 12 MiB.
const rssGrowthBound = 12 << 20

// badInputShot returns a request of the given kind of bad input to url,
// and the rule it must end by. proxyURL is the proxy's base URL.
func badInputShot(rng *rand.Rand, kind, proxyURL string) shot {
	chat := proxyURL + "/v1/chat/completions"
	known := map[string]string{"Authorization": "Bearer " + chatKey}
	switch kind {
	case "unknown-key": // a key no caller has: 401
		key := fmt.Sprintf("sk-unknown-%016x", rng.Uint64())
		h := [...]string{"Authorization", "Api-Key", "X-Api-Key"}[rng.IntN(3)]
		v := key
		if h == "Authorization" {
			v = "Bearer " + key
		}
		return shot{url: chat, body: chatBody, headers: map[string]string{h: v}}
	case "junk-headers": // garbage where the key and the class go, and plenty besides: 401
		h := map[string]string{
			"Authorization":      [...]string{"Basic Zm9vOmJhcg==", "Bearer", "Bearer " + strings.Repeat("\xfe", 4096), "bearer\t" + chatKey[:10], "Token " + chatKey}[rng.IntN(5)],
			"X-Meterproxy-Class": [...]string{"INTERACTIVE!", "", strings.Repeat("bulk", 500), "\xff\xfe"}[rng.IntN(4)],
			"Content-Type":       "application/\xffjson; charset=\x80",
		}
		for i := range 50 {
			h[fmt.Sprintf("X-Junk-%d", i)] = strings.Repeat("\x80<%00>{", rng.IntN(64))
		}
		return shot{url: chat, body: chatBody, headers: h}
	case "oversize": // a Content-Length over the limit: 413 before a byte is read
		return shot{url: chat, body: strings.Repeat("x", 2*maxBody), headers: known, refusedUnread: "body_too_large"}
	case "oversize-chunked": // no length, the body runs over the limit while read: 413
		return shot{url: chat, body: strings.Repeat("y", 2*maxBody), headers: known, chunked: true, refusedUnread: "body_too_large"}
	case "bad-json": // a known caller, a body that is not JSON: the upstream's 400, forwarded
		body := [...]string{`{"model":`, "not json at all", "\x00\x01\x02\xff", `{"model":"m","messages":[}`, strings.Repeat("{", maxBody/2)}[rng.IntN(5)]
		return shot{url: chat, body: body, headers: known}
	}
	panic("unknown kind " + kind)
}

var badInputRules = map[string]kindRule{
	"unknown-key":      {refused: []string{"unknown_caller"}, must: "unknown_caller"},
	"junk-headers":     {refused: []string{"unknown_caller"}, must: "unknown_caller"},
	"oversize":         {refused: []string{"body_too_large"}, must: "body_too_large"},
	"oversize-chunked": {refused: []string{"body_too_large"}, must: "body_too_large"},
	// "\x00\x01…" reads as UTF-16 to Python's json.loads: meterproxy's 400.
	"bad-json": {forwarded: []string{"4xx"}, refused: []string{"bad_request"}, must: "4xx"},
}

// malformed are requests net/http itself refuses before meterproxy's
// handler sees them, with the status it answers.
var malformed = []struct {
	raw    string
	status int
}{
	{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nno colon in this line\r\n\r\n", http.StatusBadRequest},
	{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", http.StatusBadRequest},
	{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Ctl: a\x01b\r\n\r\n", http.StatusBadRequest},
	{"POST /v1/chat/completions HTTP/1.1\r\n\r\n", http.StatusBadRequest}, // no Host
	{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", http.StatusBadRequest},
	{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Huge: " + strings.Repeat("h", 1<<20+8192) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
}

// sendRaw writes raw to addr and returns the status of the answer.
func sendRaw(addr, raw string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	return res.StatusCode, res.Body.Close()
}

// TestFaultBadInput: with unknown_callers: reject and a 64 KiB body limit,
// 10,000 requests with keys no caller has, 1,000 with junk headers, 1,200
// oversized bodies (with and without a length) and 1,000 invalid JSON
// bodies. Each gets a clear 4xx: meterproxy's own 401 or 413 in JSON, the
// upstream's 400 for the JSON it could not parse. 300 malformed at the
// HTTP level get net/http's 400 or 431 and never reach the handler, so
// they move no counter. The identity holds, nothing stays in flight,
// goroutines return to idle, and resident memory grows by less than
// rssGrowthBound between the end of a warm-up tenth and the end.
func TestFaultBadInput(t *testing.T) {
	fake := startFake(t, "-latency", "0s")
	cfg := baseConfig(fake.URL)
	cfg.withCallers()
	cfg.set("classify.unknown_callers", "reject")
	cfg.set("server.max_body_bytes", maxBody)
	cfg.set("account.requests_per_minute", 6_000_000)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	idle := readIdle(t, p.AdminURL)
	client := loadClient(t, 64)
	rng := seeded(t, 5)
	counts := map[string]int{"unknown-key": 10_000, "junk-headers": 1000, "oversize": 1000, "oversize-chunked": 200, "bad-json": 1000}
	var jobs []string
	for kind, n := range counts {
		for range n {
			jobs = append(jobs, kind)
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	l := newLedger()
	run := func(kinds []string) {
		type job struct {
			s    shot
			kind string
		}
		jobs := make(chan job)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for j := range jobs {
					l.of("p", j.kind).record(fire(client, j.s, nil))
				}
			})
		}
		for _, kind := range kinds {
			jobs <- job{badInputShot(rng, kind, p.URL), kind}
		}
		close(jobs)
		wg.Wait()
	}
	// Malformed at the HTTP level: answered by net/http, never counted.
	addr := strings.TrimPrefix(p.URL, "http://")
	var mu sync.Mutex
	wrong := map[string]int{}
	raw := func(n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range n {
			m := malformed[i%len(malformed)]
			if m.status == http.StatusRequestHeaderFieldsTooLarge && i%(10*len(malformed)) != len(malformed)-1 {
				m = malformed[0] // one in ten of the 1 MiB ones
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				status, err := sendRaw(addr, m.raw)
				if err != nil || status != m.status {
					mu.Lock()
					wrong[fmt.Sprintf("%d %v (want %d)", status, err, m.status)]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}

	// Four rounds of a quarter each; the first warms the proxy up (pools
	// filled, heap at its working size), the last three must not grow it.
	const rounds = 4
	var rss []float64
	var last reading
	start := time.Now()
	for i := range rounds {
		run(jobs[i*len(jobs)/rounds : (i+1)*len(jobs)/rounds])
		raw(300 / rounds)
		// The counters after each round: the requests counted, and the
		// malformed ones, which never reach the handler, not.
		last = checkIdentityOf(t, fmt.Sprintf("proxy after round %d of %d", i+1, rounds), p.AdminURL, l.proxy("p"), idle)
		rss = append(rss, last.rss)
	}
	took := time.Since(start)
	if len(wrong) > 0 {
		t.Errorf("malformed requests answered %v", wrong)
	}
	checkRules(t, l, badInputRules)
	t.Logf("%d bad requests and 300 malformed ones in %s (%.0f a second)", len(jobs), took.Round(time.Millisecond), float64(len(jobs)+300)/took.Seconds())
	mib := make([]string, len(rss))
	for i, v := range rss {
		mib[i] = fmt.Sprintf("%.1f", v/(1<<20))
	}
	growth := rss[rounds-1] - rss[0]
	t.Logf("resident memory after each round: %s MiB (growth after the warm-up round %+.1f MiB, bound %d MiB)", strings.Join(mib, ", "), growth/(1<<20), rssGrowthBound>>20)
	if growth > rssGrowthBound {
		t.Errorf("resident memory grew by %.1f MiB after the warm-up round, bound %d MiB", growth/(1<<20), rssGrowthBound>>20)
	}
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "proxy", p, idle)
}
