package usage

import (
	"fmt"
	"strings"
	"testing"
)

// TestMeterCacheAndTier: each API's answers, JSON and streamed, report the
// cached part of their input and the service tier that served them — the
// tier named last, on whichever chunk or event named it; continuous usage
// keeps the high-water mark of the cache parts too; an estimate has no
// cache parts but the tier the response named.
func TestMeterCacheAndTier(t *testing.T) {
	tests := []struct {
		name        string
		api         API
		contentType string
		body        string
		complete    bool
		want        Usage
	}{
		// Chat Completions.
		{"chat JSON", ChatCompletions, appJSON, chatCachedJSON, true, Usage{Input: 2006, Output: 300, Reasoning: 256, CacheRead: 1920, Tier: "flex", Model: "gpt-4o-2024-08-06"}},
		{"chat JSON cache writes", ChatCompletions, appJSON, chatCacheWriteJSON, true, Usage{Input: 4096, Output: 10, CacheRead: 1024, CacheWrite: 512, Tier: "priority", Model: "gpt-5"}},
		{"chat JSON cut short: estimated, the tier kept", ChatCompletions, appJSON, chatCachedJSON[:len(chatCachedJSON)-10], false,
			Usage{Input: est, Output: ceilQuarter(int64(len("From the cache."))), Tier: "flex", Model: "gpt-4o-2024-08-06", Estimated: true}},
		{"chat stream", ChatCompletions, eventStream, sse(chunkPrioHello, chunkPrioStop, chunkPrioUsage, chunkDone), true,
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "priority", Model: "gpt-4o"}},
		{"chat stream, the tier on early chunks only", ChatCompletions, eventStream, sse(chunkPrioHello, chunkNullTier, chunkNoTierStop, chunkNoTierUsage, chunkDone), true,
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "priority", Model: "gpt-4o"}},
		{"chat stream cut before its usage", ChatCompletions, eventStream, sse(chunkPrioHello), false,
			Usage{Input: est, Output: ceilQuarter(int64(len("Hello"))), Tier: "priority", Model: "gpt-4o", Estimated: true}},
		{"chat stream without [DONE]: the reported input and its cache parts kept", ChatCompletions, eventStream, sse(chunkPrioHello, chunkPrioUsage), true,
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "priority", Model: "gpt-4o", Estimated: true}},
		{"continuous usage: high-water cache parts", ChatCompletions, eventStream, sse(vllmCache1, vllmCache2, vllmCache3, chunkDone), true,
			Usage{Input: 40, Output: 3, CacheRead: 32, CacheWrite: 8}},
		{"continuous usage: high-water parts bounded by the input", ChatCompletions, eventStream,
			sse(vllmCache1, strings.Replace(vllmCache2, `"cache_write_tokens":8`, `"cache_write_tokens":30`, 1), chunkDone), true,
			Usage{Input: 40, Output: 2, CacheRead: 32, CacheWrite: 8}},
		// Responses API.
		{"responses JSON", Responses, appJSON, responsesCachedJSON, true, Usage{Input: 3000, Output: 87, Reasoning: 64, CacheRead: 2048, CacheWrite: 512, Tier: "flex", Model: "gpt-4.1"}},
		{"responses stream: the served tier replaces the one asked for", Responses, eventStream, sse(respCreatedAuto, respDelta1, respDelta2, respCachedDone), true,
			Usage{Input: 37, Output: 11, CacheRead: 24, Tier: "default", Model: "gpt-4.1"}},
		{"responses stream, the tier on response.created only", Responses, eventStream, sse(respCreatedFlex, respDelta1, respNoTierDone), true,
			Usage{Input: 37, Output: 11, CacheRead: 24, Tier: "flex", Model: "gpt-4.1"}},
		{"responses stream cut: estimated, the tier kept", Responses, eventStream, sse(respCreatedFlex, respDelta1), false,
			Usage{Input: est, Output: ceilQuarter(int64(len("Hi"))), Tier: "flex", Model: "gpt-4.1", Estimated: true}},
		// Anthropic Messages.
		{"anthropic JSON", Messages, appJSON, anthropicPriorityJSON, true, Usage{Input: 4050, Output: 12, CacheRead: 4000, Tier: "priority", Model: "claude-sonnet-4-5"}},
		{"anthropic stream: message_delta replaces", Messages, eventStream, sse(antPrioStart, antDelta1, antPrioDelta, antStop), true,
			Usage{Input: 2310, Output: 25, CacheRead: 300, CacheWrite: 2000, Tier: "priority", Model: "claude-sonnet-4-5"}},
		{"anthropic stream: the last tier named wins", Messages, eventStream, sse(antPrioStart, antDelta1, antBatchDelta, antStop), true,
			Usage{Input: 2010, Output: 25, CacheWrite: 2000, Tier: "batch", Model: "claude-sonnet-4-5"}},
		// APIs whose tier is not read.
		{"other API", Other, appJSON, chatCachedJSON, true, Usage{Input: est, Estimated: true}},
		{"embeddings", Embeddings, appJSON, `{"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached_tokens":4}},"service_tier":"flex"}`, true, Usage{Input: 8}},
	}
	for _, tt := range tests {
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(tt.api, tt.contentType, est, tt.body, size, tt.complete); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// TestMeterHostileCacheAndTier: whatever an upstream says, the cache parts
// stay within the input and a tier is kept only when it is 1–32 bytes of
// [a-z0-9_-]; counts sent as strings are not counts.
func TestMeterHostileCacheAndTier(t *testing.T) {
	chat := func(usage, rest string) string { return `{"choices":[],"usage":` + usage + rest + `}` }
	tier := func(v string) string { return chat(`{"prompt_tokens":10,"completion_tokens":2}`, `,"service_tier":`+v) }
	chunk := func(tier string) string {
		return `data: {"object":"chat.completion.chunk","service_tier":` + tier + `,"choices":[{"index":0,"delta":{"content":"x"}}]}`
	}
	tests := []struct {
		name   string
		api    API
		stream bool
		body   string
		want   Usage
	}{
		{"cached_tokens above prompt_tokens", ChatCompletions, false, chat(`{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":50,"cache_write_tokens":7}}`, ""),
			Usage{Input: 10, Output: 2, CacheRead: 10}},
		{"reads and writes above prompt_tokens", ChatCompletions, false, chat(`{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":6,"cache_write_tokens":7}}`, ""),
			Usage{Input: 10, Output: 2, CacheRead: 6, CacheWrite: 4}},
		{"cached tokens without prompt_tokens", ChatCompletions, false, chat(`{"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":50}}`, ""),
			Usage{Output: 2}},
		{"negative and fractional cache counts", ChatCompletions, false, chat(`{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":-5,"cache_write_tokens":2.9}}`, ""),
			Usage{Input: 10, Output: 2, CacheWrite: 2}},
		{"numbers as strings", ChatCompletions, false, chat(`{"prompt_tokens":"10","completion_tokens":2,"prompt_tokens_details":{"cached_tokens":"5"}}`, ""),
			Usage{Output: 2}},
		{"cached tokens as a string", ChatCompletions, false, chat(`{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":"5","cache_write_tokens":"1"}}`, ""),
			Usage{Input: 10, Output: 2}},
		{"details as a string", ChatCompletions, false, chat(`{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":"{\"cached_tokens\":5}"}`, ""),
			Usage{Input: 10, Output: 2}},
		{"responses: absurd cached tokens", Responses, false, `{"usage":{"input_tokens":5,"output_tokens":1,"input_tokens_details":{"cached_tokens":1e300,"cache_write_tokens":1e300}}}`,
			Usage{Input: 5, Output: 1, CacheRead: 5}},
		{"anthropic: absurd cache counts", Messages, false, `{"usage":{"input_tokens":5,"cache_read_input_tokens":1e300,"cache_creation_input_tokens":1e300,"output_tokens":1}}`,
			Usage{Input: 2*maxCount + 5, Output: 1, CacheRead: maxCount, CacheWrite: maxCount}},
		{"anthropic: counts as strings, tier a number", Messages, false, `{"usage":{"input_tokens":5,"cache_read_input_tokens":"100","output_tokens":1,"service_tier":7}}`,
			Usage{Input: 5, Output: 1}},
		{"repeated members: the last counts, as read from a long body's end", ChatCompletions, false,
			`{"usage":{"prompt_tokens":1,"completion_tokens":1},"service_tier":"flex","usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}},"service_tier":"priority"}`,
			Usage{Input: 10, Output: 2, CacheRead: 4, Tier: "priority"}},
		{"responses: repeated members, the last counts", Responses, false,
			`{"service_tier":"flex","usage":{"input_tokens":1,"output_tokens":1},"service_tier":"scale","usage":{"input_tokens":10,"output_tokens":2}}`,
			Usage{Input: 10, Output: 2, Tier: "scale"}},
		{"a 10 KB tier", ChatCompletions, false, tier(`"` + strings.Repeat("a", 10<<10) + `"`), Usage{Input: 10, Output: 2}},
		{"a 33-byte tier", ChatCompletions, false, tier(`"` + strings.Repeat("a", 33) + `"`), Usage{Input: 10, Output: 2}},
		{"a 32-byte tier", ChatCompletions, false, tier(`"` + strings.Repeat("a", 32) + `"`), Usage{Input: 10, Output: 2, Tier: strings.Repeat("a", 32)}},
		{"a tier with capitals", ChatCompletions, false, tier(`"Default"`), Usage{Input: 10, Output: 2}},
		{"a tier with a space", ChatCompletions, false, tier(`"flex "`), Usage{Input: 10, Output: 2}},
		{"a tier with a space inside", ChatCompletions, false, tier(`"de fault"`), Usage{Input: 10, Output: 2}},
		{"a tier outside ASCII", ChatCompletions, false, tier(`"flèx"`), Usage{Input: 10, Output: 2}},
		{"a tier with a control character", ChatCompletions, false, tier(`"flex\u0000"`), Usage{Input: 10, Output: 2}},
		{"an empty tier", ChatCompletions, false, tier(`""`), Usage{Input: 10, Output: 2}},
		{"a tier as a number", ChatCompletions, false, tier(`5`), Usage{Input: 10, Output: 2}},
		{"a tier as an object", ChatCompletions, false, tier(`{"name":"flex"}`), Usage{Input: 10, Output: 2}},
		{"a tier escaped into the set", ChatCompletions, false, tier(`"fl\u0065x"`), Usage{Input: 10, Output: 2, Tier: "flex"}},
		{"stream: a bad tier after a good one leaves none", ChatCompletions, true,
			sse(chunk(`"flex"`), chunk(`"FLEX"`), chunkNoTierUsage, chunkDone), Usage{Input: 1500, Output: 40, CacheRead: 1280, Model: "gpt-4o"}},
		{"stream: a good tier after a bad one", ChatCompletions, true,
			sse(chunk(`"x y"`), chunk(`"flex"`), chunkNoTierUsage, chunkDone), Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "flex", Model: "gpt-4o"}},
		{"stream: a tier of no known name, kept whole past the events after it", ChatCompletions, true,
			sse(chunk(`"tier_x9"`), chunkNoTierUsage, chunkDone), Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "tier_x9", Model: "gpt-4o"}},
		{"stream: a null tier changes nothing", ChatCompletions, true,
			sse(chunk(`"flex"`), chunk(`null`), chunkNoTierUsage, chunkDone), Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "flex", Model: "gpt-4o"}},
	}
	for _, tt := range tests {
		contentType := appJSON
		if tt.stream {
			contentType = eventStream
		}
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(tt.api, contentType, est, tt.body, size, true); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// TestMeterTierOfLongEvents: the tier of an answer or event too long to
// keep whole is read from its end, or else from its first bytes; a tier
// cut off where the first bytes end is not read as a shorter one.
func TestMeterTierOfLongEvents(t *testing.T) {
	big := pad(1 << 20)
	longChunk := func(head, tail string) string {
		return `data: {"id":"c","object":"chat.completion.chunk"` + head + `,"choices":[{"index":0,"delta":{"content":"` + big + `"}}]` + tail + `}`
	}
	// A tier whose value the window's first 512 bytes cut after "pri".
	idPad := strings.Repeat("x", windowHead-len(`{"id":"`)-len(`","service_tier":"pri`))
	straddling := `data: {"id":"` + idPad + `","service_tier":"priority","choices":[{"index":0,"delta":{"content":"` + big + `"}}]}`
	respEvent := func(typ, members string) string {
		return "event: " + typ + "\n" + `data: {"type":"` + typ + `","sequence_number":1,"response":{"id":"r","instructions":"` + big + `"` + members + `}}`
	}
	respBody := func(head, tail string) string {
		return `{"id":"r","object":"response"` + head + `,"output":[{"type":"message","content":[{"type":"output_text","text":"` + big + `"}]}]` + tail + `}`
	}
	respUsage := `,"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":12},"output_tokens":9}`
	tests := []struct {
		name        string
		api         API
		contentType string
		body        string
		want        Usage
	}{
		{"chat chunk, the tier at its start", ChatCompletions, eventStream, sse(longChunk(`,"service_tier":"priority"`, ""), chunkNoTierUsage, chunkDone),
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "priority", Model: "gpt-4o"}},
		{"chat chunk, the tier at its end", ChatCompletions, eventStream, sse(chunk0Flex, longChunk(`,"service_tier":"scale"`, `,"service_tier":"priority"`), chunkNoTierUsage, chunkDone),
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "priority", Model: "gpt-4o"}},
		{"chat chunk, the tier cut where its first bytes end", ChatCompletions, eventStream, sse(chunk0Flex, straddling, chunkNoTierUsage, chunkDone),
			Usage{Input: 1500, Output: 40, CacheRead: 1280, Tier: "flex", Model: "gpt-4o"}},
		{"responses created, the tier after long instructions", Responses, eventStream, sse(respEvent("response.created", `,"service_tier":"flex","usage":null`), respNoTierDone),
			Usage{Input: 37, Output: 11, CacheRead: 24, Tier: "flex"}},
		{"responses completed, the tier before its usage", Responses, eventStream, sse(respCreatedAuto, respEvent("response.completed", `,"service_tier":"priority"`+respUsage)),
			Usage{Input: 36, Output: 9, CacheRead: 12, Tier: "priority", Model: "gpt-4.1"}},
		{"responses body, the tier before its output", Responses, appJSON, respBody(`,"service_tier":"flex"`, respUsage), Usage{Input: 36, Output: 9, CacheRead: 12, Tier: "flex"}},
		{"responses body, the tier near its end", Responses, appJSON, respBody(`,"service_tier":"scale"`, `,"service_tier":"flex"`+respUsage+`,"user":null,"metadata":{}`),
			Usage{Input: 36, Output: 9, CacheRead: 12, Tier: "flex"}},
	}
	for _, tt := range tests {
		for _, size := range []int{32 << 10, 4093, 0} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(tt.api, tt.contentType, est, tt.body, size, true); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// chunk0Flex is a short chat chunk naming the flex tier.
const chunk0Flex = `data: {"id":"c","object":"chat.completion.chunk","service_tier":"flex","choices":[{"index":0,"delta":{"content":""}}]}`
