//go:build faults

package test

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// upstreamFaultShots are the requests that make the upstream misbehave, by
// kind: what each is sent with, and the rule for how it must end. url is a
// proxy in front of the fake provider; resetURL one in front of an upstream
// that resets every connection; timeout is the proxies'
// upstream.response_header_timeout.
func upstreamFaultShots(url, resetURL string, timeout time.Duration) (map[string]shot, map[string]kindRule) {
	h := func(name, value string) map[string]string {
		m := map[string]string{"Authorization": "Bearer " + importKey}
		if name != "" {
			m[name] = value
		}
		return m
	}
	chat := url + "/v1/chat/completions"
	shots := map[string]shot{
		// No headers within the timeout: 504 upstream_timeout.
		"slow": {url: chat, body: chatBody, headers: h("X-Fake-Latency", (3 * timeout).String())},
		// A reset instead of an answer: 502 upstream_unreachable.
		"reset": {url: resetURL + "/v1/chat/completions", body: chatBody, headers: h("", "")},
		// The upstream's own 500: forwarded as it is.
		"500": {url: chat, body: chatBody, headers: h("X-Fake-Status", "500")},
		// A stream the upstream aborts after 3 chunks: forwarded, cut short.
		"cut": {url: chat, body: streamBody, headers: h("X-Fake-Cut-After", "3")},
		// Healthy requests beside the faults.
		"chat":   {url: chat, body: chatBody, headers: h("", "")},
		"stream": {url: chat, body: streamBody, headers: h("", "")},
	}
	rules := map[string]kindRule{
		"slow":   {refused: []string{"upstream_timeout"}, must: "upstream_timeout"},
		"reset":  {refused: []string{"upstream_unreachable"}, must: "upstream_unreachable"},
		"500":    {forwarded: []string{"5xx"}, must: "5xx"},
		"cut":    {forwarded: []string{"2xx"}, cut: true, must: "2xx"},
		"chat":   {forwarded: []string{"2xx"}, must: "2xx"},
		"stream": {forwarded: []string{"2xx"}, must: "2xx"},
	}
	return shots, rules
}

// TestFaultUpstream: one proxy in front of the fake provider, one in front
// of an upstream that resets every connection. 1,100 requests at once:
// slow (no headers within upstream.response_header_timeout → 504
// upstream_timeout), reset (→ 502 upstream_unreachable), the upstream's own
// 500s (forwarded as 500, counted forwarded), streams the upstream aborts
// halfway (forwarded, cut short, counted in
// meterproxy_responses_cut_short_total{side="upstream"}), and healthy ones.
// Then a storm of 429s with retry-after: forwarded as they are, and bulk is
// held while interactive goes at once. The identity holds on both proxies,
// nothing stays in flight, goroutines return to idle.
func TestFaultUpstream(t *testing.T) {
	const timeout = 500 * time.Millisecond
	fake := startFake(t, "-latency", "5ms", "-chunks", "10", "-chunk-interval", "10ms")
	reset := startResetter(t)
	cfg := baseConfig(fake.URL)
	cfg.withCallers()
	cfg.set("upstream.response_header_timeout", timeout.String())
	// Windows that never bind: after the storm the only thing that may hold
	// a request is the upstream's word.
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("classes.bulk.max_wait", "30s")
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	cfg.set("upstream.url", reset.URL)
	// A reset must read as a reset however slowly this busy machine
	// accepts the connection, never as a timeout.
	cfg.set("upstream.response_header_timeout", "30s")
	pr := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	idle, idleR := readIdle(t, p.AdminURL), readIdle(t, pr.AdminURL)

	shots, rules := upstreamFaultShots(p.URL, pr.URL, timeout)
	counts := map[string]int{"slow": 100, "reset": 200, "500": 200, "cut": 100, "chat": 400, "stream": 100}
	client := loadClient(t, 512)
	l := newLedger()
	var wg sync.WaitGroup
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		target := "p"
		if kind == "reset" {
			target = "pr"
		}
		for range counts[kind] {
			wg.Go(func() { l.of(target, kind).record(fire(client, shots[kind], nil)) })
		}
	}
	wg.Wait()

	// The storm: interactive requests the upstream answers 429 with
	// retry-after 2 s. Then bulk and interactive together: interactive goes
	// at once, bulk waits out the hold.
	before := scrape(t, p.AdminURL)
	const storm, after = 50, 20
	stormShot := shot{url: p.URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{
		"Authorization": "Bearer " + chatKey, "X-Fake-Status": "429", "X-Fake-Retry-After": "2"}}
	for range storm {
		wg.Go(func() { l.of("p", "storm").record(fire(client, stormShot, nil)) })
	}
	wg.Wait()
	var mu sync.Mutex
	var interLast, bulkFirst time.Duration
	bulkFirst = time.Hour
	stormEnd := time.Now()
	for i := range 2 * after {
		key, kind := chatKey, "after-interactive"
		if i%2 == 0 {
			key, kind = importKey, "after-bulk"
		}
		s := shot{url: p.URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{"Authorization": "Bearer " + key}}
		wg.Go(func() {
			a := fire(client, s, nil)
			took := time.Since(stormEnd)
			l.of("p", kind).record(a)
			mu.Lock()
			defer mu.Unlock()
			if key == chatKey {
				interLast = max(interLast, took)
			} else {
				bulkFirst = min(bulkFirst, took)
			}
		})
	}
	wg.Wait()
	rules["storm"] = kindRule{forwarded: []string{"4xx"}, must: "4xx"}
	rules["after-interactive"] = kindRule{forwarded: []string{"2xx"}, must: "2xx"}
	rules["after-bulk"] = kindRule{forwarded: []string{"2xx"}, must: "2xx"}
	checkRules(t, l, rules)
	if tl := l.kind("storm"); tl.forwarded["4xx"] != storm {
		t.Errorf("storm: %s, want all %d forwarded as the upstream's 429", tl, storm)
	}
	m := scrape(t, p.AdminURL)
	if n := m.Sum("meterproxy_upstream_429_total", nil) - before.Sum("meterproxy_upstream_429_total", nil); n != storm {
		t.Errorf("meterproxy_upstream_429_total rose by %v, want %d", n, storm)
	}
	heldBulk := m.Sum("meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"}) -
		before.Sum("meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"})
	heldInter := m.Sum("meterproxy_admissions_total", map[string]string{"class": "interactive", "outcome": "held"}) -
		before.Sum("meterproxy_admissions_total", map[string]string{"class": "interactive", "outcome": "held"})
	if heldBulk != after || heldInter != 0 {
		t.Errorf("after the storm: %v of %d bulk held, %v interactive held; want every bulk request held and no interactive one", heldBulk, after, heldInter)
	}
	if interLast >= bulkFirst {
		t.Errorf("after the storm the last interactive answer took %s, the first bulk one %s: bulk was not held behind interactive", interLast, bulkFirst)
	}
	t.Logf("after the storm of %d 429s (retry-after 2 s): %d interactive answered within %s, %d bulk held, the first answered after %s",
		storm, after, interLast.Round(time.Millisecond), after, bulkFirst.Round(time.Millisecond))

	for _, x := range []struct {
		name    string
		admin   string
		base    reading
		cutWant int
	}{{"p", p.AdminURL, idle, counts["cut"]}, {"pr", pr.AdminURL, idleR, 0}} {
		r := checkIdentityOf(t, "proxy "+x.name, x.admin, l.proxy(x.name), x.base)
		if int(r.cutUp) != x.cutWant {
			t.Errorf("proxy %s: meterproxy_responses_cut_short_total{side=upstream} %v, want %d", x.name, r.cutUp, x.cutWant)
		}
	}
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "proxy p", p, idle)
	checkIdle(t, "proxy pr", pr, idleR)
	t.Logf("the resetting upstream reset %d connections", reset.resets())
}
