package test

import (
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// geminiAccountKey is the Gemini account's key the proxy holds.
const geminiAccountKey = "AIzaSy-e2e-gemini-account-key-000"

// gemini-2.5-flash's prices, USD per million tokens (config.example.yaml).
const geminiFlashIn, geminiFlashCached, geminiFlashOut = 0.30, 0.03, 2.50

const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"count the sheep"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":5}}}`

// TestGemini (issue 36 item 2): meterproxy in front of a Gemini account
// (upstream.provider gemini), the fake provider speaking Gemini, whose
// gemini-2.0-flash allows 2 requests in each 2-second window and whose
// tier has no quota for gemini-2.5-pro.
//
//   - Both APIs, plain and streamed (Gemini's SSE and its JSON array; the
//     OpenAI-compatible endpoint's chat completions, plain and SSE), are
//     metered at exactly the usage the fake reports, thoughts as output,
//     and priced at it (cached content at its price), with the account's
//     key where each API reads it.
//   - A model without quota (Google's 429 with quotaValue "0") is
//     answered no_quota_for_model in each API's shape, and holds nothing.
//   - Gemini's own 429 (RESOURCE_EXHAUSTED, no rate-limit header, its
//     RetryInfo's delay in the body) holds bulk until the delay: the bulk
//     requests sent right after it wait it out, and the fake answers no
//     further 429.
func TestGemini(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, StreamChunks: 3, Window: 2 * time.Second,
		Models: []fakeprovider.ModelLimits{{Name: "gemini-2.0-flash", RPM: 60}, {Name: "gemini-2.5-pro", NoQuota: true}}})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.withCallers()
	cfg.set("upstream.provider", "gemini")
	cfg.set("classify.unknown_callers", "reject")
	// Windows that never bind: only the upstream's word may hold a request.
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("classes.bulk.max_wait", "30s")
	cfg.set("prices", []map[string]any{{"match": []string{"gemini-2.5-flash*"}, "input": geminiFlashIn, "cached_input": geminiFlashCached, "output": geminiFlashOut}})
	env := append([]string{"METERPROXY_UPSTREAM_API_KEY=" + geminiAccountKey}, fleetEnv...)
	p := startProxy(t, cfg, env, chatKey, importKey, geminiAccountKey)
	client := newClient(t, 4)
	native := func(key string) map[string]string { return map[string]string{"X-Goog-Api-Key": key} }
	compatible := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

	t.Run("metered exactly", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, body string
			headers          map[string]string
			contentType      string
		}{
			{"generateContent", "/v1beta/models/gemini-2.5-flash:generateContent", geminiBody, native(chatKey), "application/json"},
			{"v1 generateContent", "/v1/models/gemini-2.5-flash:generateContent", geminiBody, native(chatKey), "application/json"},
			{"streamGenerateContent alt=sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", geminiBody, native(chatKey), "text/event-stream"},
			{"cached content", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", geminiBody,
				map[string]string{"X-Goog-Api-Key": chatKey, fakeprovider.HeaderCachedTokens: "4"}, "text/event-stream"},
			{"streamGenerateContent JSON array", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", geminiBody, native(chatKey), "application/json"},
			{"key in the query", "/v1beta/models/gemini-2.5-flash:generateContent?key=" + chatKey, geminiBody, nil, "application/json"},
			{"openai-compatible", "/v1beta/openai/chat/completions", `{"model":"gemini-2.5-flash","messages":[{"role":"user","content":"hi"}]}`,
				compatible(chatKey), "application/json"},
			{"openai-compatible stream", "/v1beta/openai/chat/completions",
				`{"model":"gemini-2.5-flash","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
				compatible(chatKey), "text/event-stream"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				fake.Reset()
				spend := map[string]string{"caller": "chat-frontend", "estimated": "false"}
				spent0 := scrape(t, p.AdminURL).Sum("meterproxy_spend_usd_total", spend)
				before := readTokens(scrape(t, p.AdminURL), "chat-frontend")
				status, h, b := post(t, client, p.URL+tc.path, tc.body, tc.headers)
				if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), tc.contentType) {
					t.Fatalf("%d %q: %s", status, h.Get("Content-Type"), b)
				}
				got := tokensAfter(t, p.AdminURL, "chat-frontend", before, 1)
				reqs := fake.Requests()
				if len(reqs) != 1 || reqs[0].Usage == nil {
					t.Fatalf("the fake saw %d requests", len(reqs))
				}
				u, seen := reqs[0].Usage, reqs[0].Header
				want := tokenCount{int64(u.InputTokens), int64(u.OutputTokens)}
				if got.reported != want || got.estimated != (tokenCount{}) || want.in == 0 || want.out == 0 {
					t.Errorf("metered %s reported, %s estimated; the fake reports %s", got.reported, got.estimated, want)
				}
				if _, cached := tc.headers[fakeprovider.HeaderCachedTokens]; cached != (u.CachedTokens == 4) {
					t.Errorf("the fake reports %d cached tokens", u.CachedTokens)
				}
				cost := (float64(u.InputTokens-u.CachedTokens)*geminiFlashIn + float64(u.CachedTokens)*geminiFlashCached + float64(u.OutputTokens)*geminiFlashOut) / 1e6
				if spent := scrape(t, p.AdminURL).Sum("meterproxy_spend_usd_total", spend) - spent0; math.Abs(spent-cost) > cost*1e-6 || cost == 0 {
					t.Errorf("spent $%.9f, want $%.9f (%+v at gemini-2.5-flash's prices)", spent, cost, *u)
				}
				if strings.HasPrefix(tc.path, "/v1beta/openai/") {
					if seen.Get("Authorization") != "Bearer "+geminiAccountKey {
						t.Errorf("the fake saw Authorization %q, want the account's key", seen.Get("Authorization"))
					}
				} else if seen.Get("X-Goog-Api-Key") != geminiAccountKey || strings.Contains(reqs[0].Path, chatKey) {
					t.Errorf("the fake saw x-goog-api-key %q at %s, want the account's key", seen.Get("X-Goog-Api-Key"), reqs[0].Path)
				}
			})
		}
	})

	t.Run("no quota for the model", func(t *testing.T) {
		fake.Reset()
		before := scrape(t, p.AdminURL)
		for _, tc := range []struct {
			path, body string
			headers    map[string]string
			shape      func(b []byte) bool
		}{
			{"/v1beta/models/gemini-2.5-pro:generateContent", geminiBody, native(importKey), func(b []byte) bool {
				e := gjson.GetBytes(b, "error")
				return e.Get("status").Str == "RESOURCE_EXHAUSTED" && e.Get("code").Int() == 429 &&
					e.Get(`details.#(reason=="no_quota_for_model").domain`).Str == "meterproxy"
			}},
			{"/v1beta/openai/chat/completions", `{"model":"gemini-2.5-pro","messages":[]}`, compatible(importKey), func(b []byte) bool {
				return gjson.GetBytes(b, "error.code").Str == "no_quota_for_model" && gjson.GetBytes(b, "error.type").Str == "insufficient_quota"
			}},
		} {
			status, h, b := post(t, client, p.URL+tc.path, tc.body, tc.headers)
			if status != http.StatusTooManyRequests || !tc.shape(b) || !strings.Contains(string(b), "gemini-2.5-pro") || h.Get("Retry-After") != "" {
				t.Errorf("%s: %d %v %s, want no_quota_for_model naming the model, in the API's shape, without a retry hint", tc.path, status, h, b)
			}
		}
		// The next bulk request goes at once: nothing was held.
		if status, _, b := post(t, client, p.URL+"/v1beta/models/gemini-2.5-flash:generateContent", geminiBody, native(importKey)); status != http.StatusOK {
			t.Fatalf("the next request: %d %s", status, b)
		}
		m := scrape(t, p.AdminURL)
		bulkHeld := map[string]string{"class": "bulk", "outcome": "held"}
		if held := m.Sum("meterproxy_admissions_total", bulkHeld) - before.Sum("meterproxy_admissions_total", bulkHeld); held != 0 {
			t.Errorf("%v bulk requests held after the 429s without quota, want none", held)
		}
		if hold := m.Sum("meterproxy_upstream_hold_seconds", nil); hold != 0 {
			t.Errorf("meterproxy_upstream_hold_seconds %v, want 0", hold)
		}
		refused := map[string]string{"reason": "no_quota_for_model"}
		if n := m.Sum("meterproxy_refusals_total", refused) - before.Sum("meterproxy_refusals_total", refused); n != 2 {
			t.Errorf("meterproxy_refusals_total{reason=no_quota_for_model} rose by %v, want 2", n)
		}
		if st := fake.Stats(); st.Requests != 3 || st.RateLimited != 2 {
			t.Errorf("the fake saw %d requests, %d rate-limited; want 3 and 2 (none retried)", st.Requests, st.RateLimited)
		}
	})

	t.Run("RetryInfo holds", func(t *testing.T) {
		fake.Reset()
		before := scrape(t, p.AdminURL)
		path := p.URL + "/v1beta/models/gemini-2.0-flash:generateContent"
		var limited []byte
		for range 10 { // 2 requests a window: the third in one is refused
			status, h, b := post(t, client, path, geminiBody, native(importKey))
			if status == http.StatusTooManyRequests {
				if h.Get("Retry-After") != "" || !strings.Contains(string(b), "google.rpc.RetryInfo") {
					t.Fatalf("not Gemini's 429: %v %s", h, b)
				}
				limited = b
				break
			}
			if status != http.StatusOK {
				t.Fatalf("%d %s", status, b)
			}
		}
		if limited == nil {
			t.Fatal("the fake never answered 429")
		}
		delay := gjson.GetBytes(limited, `error.details.#(@type=="type.googleapis.com/google.rpc.RetryInfo").retryDelay`).Str
		// Right after it: bulk waits the delay out, and then the window
		// has room for both.
		const after = 2
		var wg sync.WaitGroup
		statuses := make([]int, after)
		for i := range after {
			wg.Go(func() { statuses[i], _, _ = post(t, client, path, geminiBody, native(importKey)) })
		}
		wg.Wait()
		m := scrape(t, p.AdminURL)
		bulkHeld := map[string]string{"class": "bulk", "outcome": "held"}
		held := m.Sum("meterproxy_admissions_total", bulkHeld) - before.Sum("meterproxy_admissions_total", bulkHeld)
		upstream429 := m.Sum("meterproxy_upstream_429_total", nil) - before.Sum("meterproxy_upstream_429_total", nil)
		if st := fake.Stats(); st.RateLimited != 1 || upstream429 != 1 {
			t.Errorf("after Gemini's 429 (retryDelay %s) the fake answered %d 429s in all, meterproxy counted %v; want 1: none after it", delay, st.RateLimited, upstream429)
		}
		if held != after || statuses[0] != http.StatusOK || statuses[1] != http.StatusOK {
			t.Errorf("after Gemini's 429 (retryDelay %s): %v of %d bulk requests held, answered %v; want all held, then served", delay, held, after, statuses)
		}
	})
}
