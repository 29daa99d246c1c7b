//go:build faults

package test

import (
	"sync"
	"testing"
)

// TestFaultAccounts: two accounts behind one proxy (upstream.accounts),
// chat-project (serves interactive, lends to bulk) in front of the fake
// provider, batch-project (serves bulk) in front of an upstream that
// resets every connection: one account down. 600 requests at once, half
// interactive, half bulk, streams among them. Interactive is answered
// whole by its own account, whatever the other's upstream does; bulk is
// answered by chat when it borrows, and 502 upstream_unreachable when it
// went to its own; nothing else. The accounting identity holds, nothing is
// left in flight and goroutines return to idle.
func TestFaultAccounts(t *testing.T) {
	fake := startFake(t, "-latency", "5ms", "-chunks", "10", "-chunk-interval", "5ms")
	reset := startResetter(t)
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
		{"name": "batch-project", "url": reset.URL, "api_key_env": "OPENAI_KEY_BATCH",
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
	either := kindRule{forwarded: []string{"2xx"}, refused: []string{"upstream_unreachable"}, must: "upstream_unreachable"}
	checkRules(t, l, map[string]kindRule{"interactive": own, "interactive-stream": own, "bulk": either, "bulk-stream": either})
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
	if reset.resets() == 0 {
		t.Error("the down account's upstream saw no connection: bulk never went to its own account")
	}
}
