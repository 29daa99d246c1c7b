package test

import (
	"net/http"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/tidwall/gjson"
)

// Issue 25, bulk at the flex tier: a class with service_tier: flex sends
// its requests for flex_models at OpenAI's flex tier; flex's 429
// "Resource Unavailable" is held and retried, not shown to the caller,
// not taken for the account's rate limit.

// flexConfig is a proxy in front of up, which it takes for OpenAI's API,
// whose bulk class (nightly-import) sends gpt-4o* and o4-mini* at flex.
func flexConfig(upURL string) config {
	cfg := baseConfig(upURL)
	cfg.withCallers()
	cfg.set("upstream.provider", "openai")
	cfg.set("classes.bulk.service_tier", "flex")
	cfg.set("classes.bulk.flex_models", []string{"gpt-4o*", "o4-mini*"})
	return cfg
}

// sentTier is the service_tier the upstream read in the request that
// came with key (its last), "" none, and whether one came.
func sentTier(fake *fakeprovider.Provider, path, key string) (string, bool) {
	reqs := fake.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		r := reqs[i]
		if r.Path == path && r.Header.Get("Authorization") == "Bearer "+key {
			return gjson.GetBytes(r.Body, "service_tier").String(), true
		}
	}
	return "", false
}

// TestFlexTier: bulk requests for a flex model arrive at the provider
// with service_tier "flex", interactive ones without, a caller's own
// service_tier is kept, and Anthropic's requests of the flex class are
// not touched. While the provider answers flex 429 Resource Unavailable,
// bulk requests are held and retried, and their callers see 200 once it
// has capacity again — not the 429; meterproxy_upstream_429_total and the
// upstream hold stay 0, and meterproxy_flex_retries_total counts every
// retry.
func TestFlexTier(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
	up := startUpstream(t, fake)
	cfg := flexConfig(up.URL)
	cfg.set("classes.bulk.max_wait", "60s")
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 8)
	send := func(path, key, body string) (int, []byte) {
		status, _, b := post(t, client, p.URL+path, body, map[string]string{"Authorization": "Bearer " + key})
		return status, b
	}

	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, path, key, body, want string
	}{
		{"bulk, chat", "/v1/chat/completions", importKey, chat, "flex"},
		{"interactive, chat", "/v1/chat/completions", chatKey, chat, ""},
		{"bulk, responses", "/v1/responses", importKey, `{"model":"o4-mini","input":"hi"}`, "flex"},
		{"bulk, its own tier", "/v1/chat/completions", importKey, `{"model":"gpt-4o","service_tier":"priority","messages":[]}`, "priority"},
		{"bulk, not a flex model", "/v1/chat/completions", importKey, `{"model":"gpt-4.1","messages":[]}`, ""},
		{"bulk, anthropic", "/v1/messages", importKey, `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, ""},
	}
	for _, tt := range tests {
		status, b := send(tt.path, tt.key, tt.body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.name, status, b)
		}
		if got, ok := sentTier(fake, tt.path, tt.key); !ok || got != tt.want {
			t.Errorf("%s: the provider read service_tier %q, want %q", tt.name, got, tt.want)
		}
	}

	// No flex capacity: three bulk requests are held, retried, and served.
	fake.SetFlexUnavailable(1)
	const held = 3
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make(chan answer, held)
	for range held {
		go func() {
			status, b, err := postRaw(t, client, p.URL+"/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + importKey})
			answers <- answer{status, b, err}
		}()
	}
	poll.Until(t, "each held request retried twice", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_flex_retries_total", nil) >= 2*held
	})
	select {
	case a := <-answers:
		t.Fatalf("a request was answered while flex had no capacity: %d %s", a.status, a.body)
	default:
	}
	fake.SetFlexUnavailable(0)
	for range held {
		a := <-answers
		if a.err != nil || a.status != http.StatusOK || gjson.GetBytes(a.body, "service_tier").String() != "flex" {
			t.Errorf("held request: %d %s %v; want 200 served at flex", a.status, a.body, a.err)
		}
	}
	m := scrape(t, p.AdminURL)
	refused := fake.Stats().FlexUnavailable
	if retries := sum(m, "meterproxy_flex_retries_total", map[string]string{"pool": "default"}); retries != float64(refused) || refused < 2*held {
		t.Errorf("meterproxy_flex_retries_total = %v, the provider refused %d for want of flex capacity; want them equal, at least %d", retries, refused, 2*held)
	}
	if n := sum(m, "meterproxy_upstream_429_total", nil); n != 0 {
		t.Errorf("meterproxy_upstream_429_total = %v, want 0: flex's lack of capacity is no rate limit", n)
	}
	if n := sum(m, "meterproxy_upstream_hold_seconds", nil); n != 0 {
		t.Errorf("meterproxy_upstream_hold_seconds = %v, want 0", n)
	}
	if n := fake.Stats().RateLimited; n != 0 {
		t.Errorf("the provider rate-limited %d requests, want 0", n)
	}
}

// TestFlexMaxWait: flex without capacity past bulk's max_wait, a request
// falls back to the default tier with flex_fallback: true (resent
// without service_tier) and is served; without it the caller gets the
// provider's 429 Resource Unavailable, still not counted as a rate limit.
func TestFlexMaxWait(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		t.Run(map[bool]string{true: "fallback", false: "no fallback"}[fallback], func(t *testing.T) {
			fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true, FlexUnavailable: 1})
			up := startUpstream(t, fake)
			cfg := flexConfig(up.URL)
			cfg.set("classes.bulk.max_wait", "2s")
			cfg.set("classes.bulk.flex_fallback", fallback)
			p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
			start := time.Now()
			status, _, b := post(t, newClient(t, 1), p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`,
				map[string]string{"Authorization": "Bearer " + importKey})
			took := time.Since(start)
			switch {
			case fallback && (status != http.StatusOK || gjson.GetBytes(b, "service_tier").String() != "default"):
				t.Errorf("%d %s: want 200 served at the default tier", status, b)
			case !fallback && (status != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").String() != "resource_unavailable"):
				t.Errorf("%d %s: want the provider's 429 resource_unavailable", status, b)
			}
			if tier, _ := sentTier(fake, "/v1/chat/completions", importKey); fallback && tier != "" {
				t.Errorf("the fallback was sent with service_tier %q, want none", tier)
			}
			if took < time.Second || took > 4*time.Second {
				t.Errorf("answered after %v; want it held for most of max_wait (2s)", took)
			}
			m := scrape(t, p.AdminURL)
			if n := sum(m, "meterproxy_upstream_429_total", nil); n != 0 {
				t.Errorf("meterproxy_upstream_429_total = %v, want 0", n)
			}
			if n := sum(m, "meterproxy_flex_retries_total", nil); n < 1 {
				t.Errorf("meterproxy_flex_retries_total = %v, want retries", n)
			}
		})
	}
}
