package test

import (
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Issue 21, item 3, against the real binary: a reload is validated as the
// configuration it produces, not the file alone.

// keyUpstream answers every request 200 and records the credential
// headers each one carried.
type keyUpstream struct {
	mu   sync.Mutex
	seen []string
}

func (u *keyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Header.Get("Authorization")+" "+r.Header.Get("Api-Key")+" "+r.Header.Get("X-Api-Key"))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
}

// sawKey reports whether any request reached the upstream with key.
func (u *keyUpstream) sawKey(key string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.seen {
		if strings.Contains(s, key) {
			return true
		}
	}
	return false
}

// TestReloadRefusesOpenRelay: the proxy runs with the provider key in its
// file and unknown callers rejected. The file is rewritten without the key
// and with unknown_callers: forward — valid alone (pass-through), but the
// key is restart-only, so the running proxy would have kept it and
// forwarded anyone under it: an open relay (the review got a 200 for a
// request with no key). The reload is refused as needing a restart,
// logged and counted; a key-less request is still refused 401 and the
// upstream never sees the provider key.
func TestReloadRefusesOpenRelay(t *testing.T) {
	t.Parallel()
	const providerKey = "sk-provider-reload-secret-cccccccc"
	up := &keyUpstream{}
	cfg := baseConfig(startUpstream(t, up).URL)
	cfg.withCallers()
	cfg.set("upstream.api_key", providerKey)
	cfg.set("classify.unknown_callers", "reject")
	path := cfg.write(t)
	p := startProxyFile(t, path, fleetEnv, providerKey, chatKey, importKey)
	client := newClient(t, 2)

	if status, _, b := post(t, client, p.URL+"/v1/chat/completions", chatBody, nil); status != http.StatusUnauthorized {
		t.Fatalf("before the reload, a request with no key: %d %s, want 401", status, b)
	}

	delete(cfg["upstream"].(map[string]any), "api_key")
	cfg.set("classify.unknown_callers", "forward")
	writeYAML(t, path, cfg)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's result", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", nil) >= 1
	})
	m := scrape(t, p.AdminURL)
	if got := sum(m, "meterproxy_config_reloads_total", map[string]string{"result": "success"}); got != 0 {
		t.Errorf("meterproxy_config_reloads_total{result=success} %v: a reload that keeps the provider key and forwards unknown callers was applied", got)
	}
	if got := sum(m, "meterproxy_config_reloads_total", map[string]string{"result": "needs_restart"}); got < 1 {
		t.Errorf("meterproxy_config_reloads_total{result=needs_restart} %v, want the refused reload counted", got)
	}
	if !strings.Contains(p.Logs(), `"config_reload_refused"`) || !strings.Contains(p.Logs(), `"needs_restart"`) {
		t.Error("no config_reload_refused log line naming needs_restart")
	}

	for _, headers := range []map[string]string{nil, {"Authorization": "Bearer sk-made-up"}} {
		if status, _, b := post(t, client, p.URL+"/v1/chat/completions", chatBody, headers); status != http.StatusUnauthorized {
			t.Errorf("after the reload, a request with credential %v: %d %s, want 401", headers, status, b)
		}
	}
	if up.sawKey(providerKey) {
		t.Error("the upstream saw the provider key on a request from an unknown caller")
	}
	// The configured callers are still served under the provider key.
	if status, _, b := post(t, client, p.URL+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + chatKey}); status != http.StatusOK {
		t.Fatalf("a configured caller after the refused reload: %d %s, want 200", status, b)
	}
	if !up.sawKey(providerKey) {
		t.Error("the configured caller's request did not carry the provider key")
	}
}
