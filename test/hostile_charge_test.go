package test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/tidwall/gjson"
)

// The strict upstream's model: the most completion tokens it allows, and
// its context in tokens (at four bytes a token).
const (
	strictMaxTokens = 16384
	strictContext   = 128000
)

// strictUpstream answers like OpenAI a request it cannot serve: 400
// invalid_request_error for a max_tokens that is not a whole number from 1
// to strictMaxTokens, or a prompt longer than strictContext; any other
// request 200, a chat completion with its usage. It counts what reaches
// it.
type strictUpstream struct {
	received atomic.Int64
}

func (u *strictUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.received.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	prompt := int64(len(body)) / 4
	mt := gjson.GetBytes(body, "max_tokens")
	switch {
	case mt.Exists() && (mt.Type != gjson.Number || mt.Raw != strconv.FormatInt(mt.Int(), 10) || mt.Int() < 1 || mt.Int() > strictMaxTokens):
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"max_tokens is too large: %s. This model supports at most %d completion tokens.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}`,
			mt.Raw, strictMaxTokens)
	case prompt > strictContext:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			strictContext, prompt)
	default:
		_, _ = fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`,
			prompt, prompt+1)
	}
}

// TestHostileChargeOnTheFleet is issue 21's first item on a fleet of two
// replicas sharing one Redis, tokens enforced as OpenAI charges them (the
// larger of max_tokens and the prompt estimate, never given back for a
// short answer). One bulk caller's request with max_tokens 2^48 — or 1e300,
// or a 1 MB prompt — was charged as sent, passed as the first of its
// second, was refused by the provider with 400 and never settled, and its
// overshoot was carried from second to second without bound: every
// interactive request on both replicas got 429 max_wait_exceeded after 2 s.
// Now a charge above what one request may be charged (by default a
// minute of the pool's tokens) is refused 400 charge_too_large before it
// is charged; one the provider refuses is settled to nothing; and the
// interactive caller is admitted on both replicas.
func TestHostileChargeOnTheFleet(t *testing.T) {
	t.Parallel()
	const tpm = 120000 // 2,000 tokens a second, and the most one request may be charged
	up := &strictUpstream{}
	upstream := startUpstream(t, up)
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	cfg := fleetConfig(upstream.URL, srv, prefix)
	cfg.set("upstream.provider", "openai")
	cfg.set("account.requests_per_minute", 6000)
	cfg.set("account.tokens_per_minute", tpm)
	cfg.set("account.expected_replicas", 2)
	cfg.set("classes.bulk.max_wait", "3s") // a bulk request behind a poisoned window is refused after it
	cfg.set("store.timeout", "1s")         // about charges, not Redis faults: never degrade on a slow machine
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	client := newClient(t, 4)
	messages := func(content string) string {
		return `"messages":[{"role":"user","content":"` + content + `"}]`
	}
	hostile := []struct {
		name, body string
		ours       bool // meterproxy refuses it; else the provider does
	}{
		{"max_tokens 2^48", `{"model":"m","max_tokens":281474976710656,` + messages("hi") + `}`, true},
		{"max_tokens 1e300", `{"model":"m","max_tokens":1e300,` + messages("hi") + `}`, true},
		{"a 1 MB prompt", `{"model":"m",` + messages(strings.Repeat("a", 1<<20)) + `}`, true},
		{"max_tokens the provider refuses", `{"model":"m","max_tokens":100000,` + messages("hi") + `}`, false},
	}
	for _, h := range hostile {
		status, _, body := post(t, client, replicas[0].URL+"/v1/chat/completions", h.body, map[string]string{"Authorization": "Bearer " + importKey})
		code, msg := gjson.GetBytes(body, "error.code").String(), gjson.GetBytes(body, "error.message").String()
		switch {
		case status != http.StatusBadRequest || gjson.GetBytes(body, "error.type").String() != "invalid_request_error":
			t.Errorf("%s: %d %.300s, want 400 invalid_request_error", h.name, status, body)
		case h.ours && (code != "charge_too_large" || !strings.Contains(msg, strconv.Itoa(tpm)) || !strings.Contains(msg, "account.tokens_per_minute")):
			t.Errorf("%s: %s %q, want charge_too_large naming the limit (%d) and account.tokens_per_minute", h.name, code, msg, tpm)
		case !h.ours && code == "charge_too_large":
			t.Errorf("%s: refused by meterproxy (%q); a charge within the limit goes to the provider", h.name, msg)
		}
	}
	if n := up.received.Load(); n != 1 {
		t.Errorf("the upstream received %d requests, want 1: every charge over the limit is refused before it goes", n)
	}
	// The configured interactive caller, on both replicas.
	for i := range 6 {
		p := replicas[i%2]
		start := time.Now()
		status, _, body := post(t, client, p.URL+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + chatKey})
		if status != http.StatusOK {
			t.Errorf("interactive request %d on replica %d: %d %.200s after %s, want 200", i, i%2, status, body, time.Since(start).Round(time.Millisecond))
		}
	}
	// What Redis holds for the window is bounded: never more than a
	// minute's allowance, whatever a request asked.
	w, err := srv.Client(t).HMGet(t.Context(), "{"+prefix+"}:window", "ti", "tb").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range w {
		s, _ := v.(string)
		if f, _ := strconv.ParseFloat(s, 64); f > tpm {
			t.Errorf("Redis holds %s tokens for the window's %s: more than a minute's %d", s, []string{"interactive", "bulk"}[i], tpm)
		}
	}
}
