package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// decisionProxy has one caller, import (bulk, may not claim interactive,
// key sk-import), in front of upstream; unknown callers are refused.
// headers is server.decision_headers.
func decisionProxy(t *testing.T, upstream http.Handler, headers bool) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: upstream, environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(c *Config, _ *quota.Config, cc *classify.Config, callers *[]classify.Caller) {
			c.Server.DecisionHeaders = headers
			cc.UnknownCallers = classify.UnknownReject
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
}

// spoofingUpstream answers 200 with decision headers of its own, which
// must never reach the caller as meterproxy's.
func spoofingUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(headerClass, "interactive")
		w.Header().Set(headerPool, "spoofed")
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	})
}

// TestDecisionHeaders: issue 37 (item 6). An importer that claims
// interactive, which it may not, is told in its answer that it was
// counted as bulk, at which account and pool, and how long it waited; a
// refusal before its pool was known names its class alone; the
// upstream's own headers of those names never pass as meterproxy's; and
// server.decision_headers: false sends none of them.
func TestDecisionHeaders(t *testing.T) {
	const body = `{"model":"gpt-4o","messages":[]}`
	send := func(t *testing.T, p *testProxy, key string) (int, http.Header) {
		t.Helper()
		req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", body)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Meterproxy-Class", "interactive")
		status, h, _ := do(t, req)
		return status, h
	}
	t.Run("on by default", func(t *testing.T) {
		if !DefaultServerConfig().DecisionHeaders {
			t.Error("server.decision_headers defaults to false, want true")
		}
		p := decisionProxy(t, spoofingUpstream(), true)
		status, h := send(t, p, "sk-import")
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		for k, want := range map[string]string{headerClass: "bulk", headerAccount: "default", headerPool: "default"} {
			if got := h.Values(k); len(got) != 1 || got[0] != want {
				t.Errorf("%s = %q, want [%q]", k, got, want)
			}
		}
		if ms, err := strconv.Atoi(h.Get(headerQueueMs)); err != nil || ms < 0 || len(h.Values(headerQueueMs)) != 1 {
			t.Errorf("%s = %q, want one whole number of milliseconds", headerQueueMs, h.Values(headerQueueMs))
		}
	})
	t.Run("a refusal before the pool", func(t *testing.T) {
		p := decisionProxy(t, spoofingUpstream(), true)
		status, h := send(t, p, "sk-someone-else")
		if status != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", status)
		}
		if got := h.Get(headerClass); got != "bulk" && got != "interactive" {
			t.Errorf("%s = %q, want the class it was counted in", headerClass, got)
		}
		for _, k := range []string{headerAccount, headerPool, headerQueueMs} {
			if v := h.Values(k); len(v) > 0 {
				t.Errorf("%s = %q before the pool was known, want none", k, v)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		p := decisionProxy(t, echoUpstream(), false)
		status, h := send(t, p, "sk-import")
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		for _, k := range decisionHeaders {
			if v := h.Values(k); len(v) > 0 {
				t.Errorf("%s = %q with server.decision_headers: false", k, v)
			}
		}
	})
}

// TestDecisionHeadersAfterASpill: a request the first account answered
// 429 and the next served names the account that served it.
func TestDecisionHeadersAfterASpill(t *testing.T) {
	ptu, paygo := newAccountServer(t, http.StatusTooManyRequests), newAccountServer(t, http.StatusOK)
	p := spillProxy(t, ptu, paygo)
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`)
	req.Header.Set("Authorization", "Bearer sk-caller-chat-0123456789")
	status, h, _ := do(t, req)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if got := h.Get(headerAccount); got != "paygo" {
		t.Errorf("%s = %q, want paygo, the account that served it", headerAccount, got)
	}
	if got := h.Get(headerClass); got != "interactive" {
		t.Errorf("%s = %q, want interactive", headerClass, got)
	}
}

// TestDecisionHeadersOnASocket: a Responses WebSocket's 101 names the
// class and the account the socket is pinned to, and no pool or wait:
// its turns are admitted one by one.
func TestDecisionHeadersOnASocket(t *testing.T) {
	up := newWSUpstream()
	defer up.free()
	p := socketProxy(t, up, nil)
	hdr := http.Header{"Authorization": {"Bearer sk-alice"}, "Openai-Beta": {"responses_websockets=2026-02-06"}}
	c, resp, err := websocket.Dial(t.Context(), strings.Replace(p.URL, "http", "ws", 1)+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer func() { _ = c.CloseNow() }()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get(headerClass); got != "bulk" {
		t.Errorf("%s = %q on the 101, want bulk", headerClass, got)
	}
	if got := resp.Header.Get(headerAccount); got != "default" {
		t.Errorf("%s = %q on the 101, want default", headerAccount, got)
	}
	if v := resp.Header.Values(headerQueueMs); len(v) > 0 {
		t.Errorf("%s = %q on the 101, want none", headerQueueMs, v)
	}
}
