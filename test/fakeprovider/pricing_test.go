package fakeprovider_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/tidwall/gjson"
)

// pricedDoc is a reply, a stream chunk or a stream event's data, read for
// what pricing needs, in every provider's shape.
type pricedDoc struct {
	ServiceTier *string      `json:"service_tier"`
	Usage       *pricedUsage `json:"usage"`
	Response    *pricedDoc   `json:"response"` // a Responses stream event's response
	Message     *pricedDoc   `json:"message"`  // Anthropic's message_start
}

type pricedUsage struct {
	PromptTokens  int     `json:"prompt_tokens"`
	InputTokens   int     `json:"input_tokens"`
	CacheRead     int     `json:"cache_read_input_tokens"`
	PromptDetails cached  `json:"prompt_tokens_details"`
	InputDetails  cached  `json:"input_tokens_details"`
	ServiceTier   *string `json:"service_tier"`
}

type cached struct {
	CachedTokens int `json:"cached_tokens"`
}

// priced is what a whole reply said: every service tier it named and
// every usage it reported, in order.
type priced struct {
	tiers  []string
	usages []*pricedUsage
}

// read adds what doc says.
func (p *priced) read(doc *pricedDoc) {
	if doc == nil {
		return
	}
	if doc.ServiceTier != nil {
		p.tiers = append(p.tiers, *doc.ServiceTier)
	}
	if doc.Usage != nil {
		if doc.Usage.ServiceTier != nil {
			p.tiers = append(p.tiers, *doc.Usage.ServiceTier)
		}
		p.usages = append(p.usages, doc.Usage)
	}
	p.read(doc.Response)
	p.read(doc.Message)
}

// TestPricingFields: every answer, JSON and streamed, reports the cached
// input tokens X-Fake-Cached-Tokens asks for (at most the input) in its
// provider's shape, and names the service tier: the one asked for when it
// is flex or priority, else default; Anthropic's standard. The proxy's
// usage.Meter reads the same from it.
func TestPricingFields(t *testing.T) {
	const (
		chatPath  = "/v1/chat/completions"
		respPath  = "/v1/responses"
		msgPath   = "/v1/messages"
		azurePath = "/openai/deployments/gpt-4o/chat/completions"
		chatBody  = `{"model":"gpt-test","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`
		respBody  = `{"model":"gpt-test","input":"hi"`
		streamed  = `,"stream":true,"stream_options":{"include_usage":true}`
	)
	tests := []struct {
		name     string
		path     string
		body     string
		cached   string // the header; "" for none
		stream   bool
		wantTier string
		// wantCached is the cached tokens reported; -1 for all the input.
		wantCached int
	}{
		{"chat", chatPath, chatBody + `}`, "", false, "default", 0},
		{"chat flex, cached", chatPath, chatBody + `,"service_tier":"flex"}`, "10", false, "flex", 10},
		{"chat priority stream, cached", chatPath, chatBody + `,"service_tier":"priority"` + streamed + `}`, "10", true, "priority", 10},
		{"chat auto stream", chatPath, chatBody + `,"service_tier":"auto"` + streamed + `}`, "", true, "default", 0},
		{"chat scale", chatPath, chatBody + `,"service_tier":"scale"}`, "0", false, "default", 0},
		{"chat tier not a string", chatPath, chatBody + `,"service_tier":5}`, "", false, "default", 0},
		{"chat more cached than the input", chatPath, chatBody + `}`, "1000000", false, "default", -1},
		{"azure flex", azurePath, chatBody + `,"service_tier":"flex"}`, "3", false, "flex", 3},
		{"responses flex, cached", respPath, respBody + `,"service_tier":"flex"}`, "7", false, "flex", 7},
		{"responses priority stream, cached", respPath, respBody + `,"service_tier":"priority","stream":true}`, "7", true, "priority", 7},
		{"responses stream", respPath, respBody + `,"stream":true}`, "", true, "default", 0},
		{"messages, cached", msgPath, claudeTwo + `}`, "10", false, "standard", 10},
		{"messages stream, cached", msgPath, claudeTwo + `,"stream":true}`, "10", true, "standard", 10},
		{"messages asking auto", msgPath, claudeTwo + `,"service_tier":"auto"}`, "", false, "standard", 0},
		{"messages more cached than the input", msgPath, claudeTwo + `}`, "99999", false, "standard", -1},
	}
	_, srv := newServer(t, fakeprovider.Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.cached != "" {
				hdr[fakeprovider.HeaderCachedTokens] = tc.cached
			}
			status, header, b := send(t, srv, http.MethodPost, tc.path, tc.body, hdr)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			var p priced
			docs := 0
			if tc.stream {
				for _, ev := range parseSSE(t, b) {
					if ev.data == "[DONE]" {
						continue
					}
					docs++
					p.read(decodePtr[pricedDoc](t, []byte(ev.data)))
				}
			} else {
				docs = 1
				p.read(decodePtr[pricedDoc](t, b))
			}
			prompt := promptTokens(tc.body)
			wantCached := tc.wantCached
			if wantCached < 0 {
				wantCached = prompt
			}
			checkTiers(t, tc.path, p.tiers, docs, tc.wantTier)
			checkUsage(t, tc.path, p.usages, prompt, wantCached)

			api := map[string]usage.API{chatPath: usage.ChatCompletions, azurePath: usage.ChatCompletions, respPath: usage.Responses, msgPath: usage.Messages}[tc.path]
			m := usage.NewMeter(api, header.Get("Content-Type"), 1)
			_, _ = m.Write(b)
			want := usage.Usage{Input: int64(prompt), Output: 9, CacheRead: int64(wantCached), Tier: tc.wantTier,
				Model: gjson.Get(tc.body, "model").Str}
			if got := m.Finish(true); got != want {
				t.Errorf("metered %+v, want %+v", got, want)
			}
		})
	}
}

// checkTiers checks the tiers a reply on path named: each want; a chat
// reply names it on every chunk (docs of them), a Responses reply on
// every response it repeats, an Anthropic reply once (message_start's
// usage when streamed).
func checkTiers(t *testing.T, path string, tiers []string, docs int, want string) {
	t.Helper()
	for _, tier := range tiers {
		if tier != want {
			t.Errorf("tiers %q, want every one %q", tiers, want)
			break
		}
	}
	named := docs // a chat reply: one per chunk
	switch path {
	case "/v1/responses":
		named = 1
		if docs > 1 { // response.created, response.in_progress and the terminal event
			named = 3
		}
	case "/v1/messages":
		named = 1
	}
	if len(tiers) != named {
		t.Errorf("%d tiers named in %d documents, want %d", len(tiers), docs, named)
	}
}

// checkUsage checks the input a reply on path reported (the last usage;
// Anthropic's first, its message_start's when streamed): prompt tokens,
// cached of them read from the cache, in the provider's shape.
func checkUsage(t *testing.T, path string, usages []*pricedUsage, prompt, cached int) {
	t.Helper()
	if len(usages) == 0 {
		t.Fatal("no usage")
	}
	u := usages[len(usages)-1]
	if path == "/v1/messages" {
		u = usages[0]
	}
	var in, read int
	switch path {
	case "/v1/responses":
		in, read = u.InputTokens, u.InputDetails.CachedTokens
	case "/v1/messages":
		in, read = u.InputTokens+u.CacheRead, u.CacheRead
		if u.InputTokens != prompt-cached {
			t.Errorf("input_tokens %d, want the uncached %d", u.InputTokens, prompt-cached)
		}
	default:
		in, read = u.PromptTokens, u.PromptDetails.CachedTokens
	}
	if in != prompt || read != cached {
		t.Errorf("input %d of which cached %d, want %d of which %d: %+v", in, read, prompt, cached, *u)
	}
}

// decodePtr unmarshals b into a new T or fails the test.
func decodePtr[T any](t *testing.T, b []byte) *T {
	t.Helper()
	v := decode[T](t, b)
	return &v
}

// TestCachedTokensHeader: a value that is not a non-negative integer is
// answered 400 on every path that reports usage.
func TestCachedTokensHeader(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"} {
		for _, v := range []string{"-1", "x", "1.5", "1e3"} {
			t.Run(path+"/"+v, func(t *testing.T) {
				status, _, b := send(t, srv, http.MethodPost, path, claudeTwo+`}`, map[string]string{fakeprovider.HeaderCachedTokens: v})
				if status != http.StatusBadRequest || !json.Valid(b) {
					t.Errorf("status %d, body %s; want 400 with an error body", status, b)
				}
			})
		}
	}
}

// TestInputTokensHeader: X-Fake-Input-Tokens sets the input every reply
// reports, JSON and streamed, in each provider's shape, the cached part
// within it; a value that is not a token count is answered 400.
func TestInputTokensHeader(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	for _, tc := range []struct {
		name, path, body string
		stream           bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`, false},
		{"chat stream", "/v1/chat/completions", `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, true},
		{"responses", "/v1/responses", `{"model":"gpt-test","previous_response_id":"resp_1","input":"hi"}`, false},
		{"responses stream", "/v1/responses", `{"model":"gpt-test","input":"hi","stream":true}`, true},
		{"messages", "/v1/messages", claudeTwo + `}`, false},
		{"messages stream", "/v1/messages", claudeTwo + `,"stream":true}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{fakeprovider.HeaderInputTokens: "50000", fakeprovider.HeaderCachedTokens: "1000"}
			status, _, b := send(t, srv, http.MethodPost, tc.path, tc.body, hdr)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			var p priced
			if tc.stream {
				for _, ev := range parseSSE(t, b) {
					if ev.data != "[DONE]" {
						p.read(decodePtr[pricedDoc](t, []byte(ev.data)))
					}
				}
			} else {
				p.read(decodePtr[pricedDoc](t, b))
			}
			checkUsage(t, tc.path, p.usages, 50_000, 1000)
		})
	}
	for _, v := range []string{"-1", "many", "1.5"} {
		status, _, b := send(t, srv, http.MethodPost, "/v1/chat/completions", `{"model":"gpt-test","messages":[]}`, map[string]string{fakeprovider.HeaderInputTokens: v})
		if status != http.StatusBadRequest {
			t.Errorf("%s: %q: status %d (%s), want 400", fakeprovider.HeaderInputTokens, v, status, b)
		}
	}
}
