//go:build faults

package test

import (
	"net"
	"sync"
	"testing"

	"github.com/meterproxy/meterproxy/test/procs"
)

// TestFaultAccounts: two accounts behind one proxy (upstream.accounts),
// chat-project (serves interactive, lends to bulk) in front of the fake
// provider, batch-project (serves bulk) in front of an upstream that
// resets every connection: one account down after the request was
// written, which no proxy may send again. 600 requests at once, half
// interactive, half bulk, streams among them (faultAccounts). Interactive
// is answered whole by its own account, whatever the other's upstream
// does; bulk is answered by chat when it borrows, and 502
// upstream_unreachable when it went to its own; nothing else.
func TestFaultAccounts(t *testing.T) {
	reset := startResetter(t)
	either := kindRule{forwarded: []string{"2xx"}, refused: []string{"upstream_unreachable"}, must: "upstream_unreachable"}
	faultAccounts(t, reset.URL, either)
	if reset.resets() == 0 {
		t.Error("the down account's upstream saw no connection: bulk never went to its own account")
	}
}

// TestFaultAccountsUnreachable: the same with batch-project's upstream
// refusing connections: a request that never left moves to chat-project
// (proxy/spill.go), so every bulk request is answered 2xx, and the moves
// are counted as batch-project's spills.
func TestFaultAccountsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there from now on
	p := faultAccounts(t, down, kindRule{forwarded: []string{"2xx"}, must: "2xx"})
	if n := sum(scrape(t, p.AdminURL), "meterproxy_account_spills_total", map[string]string{"account": "batch-project"}); n == 0 {
		t.Error("no spill counted from the unreachable account: bulk never went to it first")
	}
}

// faultAccounts runs the two-account load with batch-project in front of
// down and checks it: interactive all 2xx from its own account, bulk by
// bulk's rule, the accounting identity, nothing left in flight,
// goroutines back to idle. It returns the proxy, still running.
func faultAccounts(t *testing.T, down string, bulk kindRule) *procs.Proxy {
	t.Helper()
	fake := startFake(t, "-latency", "5ms", "-chunks", "10", "-chunk-interval", "5ms")
	cfg := baseConfig(fake.URL)
	delete(cfg["upstream"].(map[string]any), "url")
	cfg.withCallers()
	cfg.set("classify.unknown_callers", "reject")
	cfg.set("classes.bulk.max_wait", "30s")
	cfg.set("upstream.response_header_timeout", "30s") // a reset reads as a reset on this busy machine, never a timeout
	cfg.set("upstream.accounts", []map[string]any{
		{"name": "chat-project", "url": fake.URL, "api_key_env": "OPENAI_KEY_CHAT",
			"account": map[string]any{"requests_per_minute": 600_000, "max_in_flight": 200},
			"serves":  []string{"interactive"}, "lends_to": []string{"bulk"}},
		{"name": "batch-project", "url": down, "api_key_env": "OPENAI_KEY_BATCH",
			"account": map[string]any{"requests_per_minute": 600_000, "max_in_flight": 200},
			"serves":  []string{"bulk"}},
	})
	p := startProxy(t, cfg, accountsEnv, chatKey, importKey, chatAccountKey, batchAccountKey)
	idle := readIdle(t, p.AdminURL)

	chat := p.URL + "/v1/chat/completions"
	as := func(key, body string) shot {
		return shot{url: chat, body: body, headers: map[string]string{"Authorization": "Bearer " + key}}
	}
	shots := map[string]shot{
		"interactive": as(chatKey, chatBody), "interactive-stream": as(chatKey, streamBody),
		"bulk": as(importKey, chatBody), "bulk-stream": as(importKey, streamBody),
	}
	counts := map[string]int{"interactive": 200, "interactive-stream": 100, "bulk": 200, "bulk-stream": 100}
	client := loadClient(t, 512)
	l := newLedger()
	var wg sync.WaitGroup
	for kind, n := range counts {
		for range n {
			wg.Go(func() { l.of("p", kind).record(fire(client, shots[kind], nil)) })
		}
	}
	wg.Wait()
	own := kindRule{forwarded: []string{"2xx"}, must: "2xx"}
	checkRules(t, l, map[string]kindRule{"interactive": own, "interactive-stream": own, "bulk": bulk, "bulk-stream": bulk})
	for _, kind := range []string{"interactive", "interactive-stream"} {
		if tl := l.kind(kind); tl.forwarded["2xx"] != counts[kind] {
			t.Errorf("%s: %s, want all %d answered by its own account while the other was down", kind, tl, counts[kind])
		}
	}
	t.Logf("bulk with its own account down: %s; streams %s", l.kind("bulk"), l.kind("bulk-stream"))
	checkIdentityOf(t, "proxy", p.AdminURL, l.proxy("p"), idle)
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "proxy", p, idle)
	return p
}
