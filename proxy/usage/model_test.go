package usage

import (
	"fmt"
	"strings"
	"testing"
)

// Answers of reasoning models, as the providers send them: a model alias
// answered as a dated snapshot, reasoning tokens inside the output.
const (
	o3ChatJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"o3-2025-04-16","choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":20,"completion_tokens":300,"total_tokens":320,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0}},"service_tier":"default"}`
	o3Chunk      = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"o3-2025-04-16","service_tier":"default","choices":[{"index":0,"delta":{"content":"42"},"finish_reason":null}],"usage":null}`
	o3UsageChunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"o3-2025-04-16","service_tier":"default","choices":[],` +
		`"usage":{"prompt_tokens":20,"completion_tokens":300,"total_tokens":320,"completion_tokens_details":{"reasoning_tokens":256}}}`
	gpt5ResponsesJSON = `{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","model":"gpt-5-2025-08-07","output":[{"type":"reasoning","summary":[]},{"type":"message","content":[{"type":"output_text","text":"42"}]}],` +
		`"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":0},"output_tokens":200,"output_tokens_details":{"reasoning_tokens":192},"total_tokens":230}}`
	gpt5Created = "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5","output":[],"usage":null}}`
	gpt5Done    = "event: response.completed\n" + `data: {"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-5-2025-08-07","output":[],` +
		`"usage":{"input_tokens":30,"output_tokens":200,"output_tokens_details":{"reasoning_tokens":192},"total_tokens":230}}}`
)

// chatWith is a chat completion whose top-level model member is the JSON
// text model, and whose usage is usage.
func chatWith(model, usage string) string {
	return `{"object":"chat.completion","model":` + model + `,"choices":[],"usage":` + usage + `}`
}

func TestMeterModelAndReasoning(t *testing.T) {
	long := strings.Repeat("m", 300)
	tests := []struct {
		name, contentType string
		api               API
		body              string
		complete          bool
		want              Usage
	}{
		// Each API, whole and streamed.
		{"chat JSON", appJSON, ChatCompletions, o3ChatJSON, true, Usage{Input: 20, Output: 300, Reasoning: 256, Tier: "default", Model: "o3-2025-04-16"}},
		{"chat stream", eventStream, ChatCompletions, sse(o3Chunk, o3UsageChunk, chunkDone), true, Usage{Input: 20, Output: 300, Reasoning: 256, Tier: "default", Model: "o3-2025-04-16"}},
		{"chat stream cut: the model kept, no reasoning apart", eventStream, ChatCompletions, sse(o3Chunk), false,
			Usage{Input: est, Output: 1, Tier: "default", Model: "o3-2025-04-16", Estimated: true}},
		{"chat stream without [DONE]: reported reasoning kept within the output", eventStream, ChatCompletions, sse(o3Chunk, o3UsageChunk), true,
			Usage{Input: 20, Output: 300, Reasoning: 256, Tier: "default", Model: "o3-2025-04-16", Estimated: true}},
		{"chat continuous usage: high-water reasoning", eventStream, ChatCompletions, sse(
			`data: {"model":"m1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":7}}}`,
			`data: {"model":"m1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8,"completion_tokens_details":{"reasoning_tokens":3}}}`, chunkDone), true,
			Usage{Input: 5, Output: 9, Reasoning: 7, Model: "m1"}},
		{"completions JSON", appJSON, Completions, `{"object":"text_completion","model":"gpt-3.5-turbo-instruct","choices":[{"text":"x"}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`, true,
			Usage{Input: 5, Output: 4, Model: "gpt-3.5-turbo-instruct"}},
		{"embeddings JSON", appJSON, Embeddings, embeddingsJSON, true, Usage{Input: 8, Model: "text-embedding-3-small"}},
		{"responses JSON", appJSON, Responses, gpt5ResponsesJSON, true, Usage{Input: 30, Output: 200, Reasoning: 192, Model: "gpt-5-2025-08-07"}},
		{"responses stream: the terminal event's model, the last named", eventStream, Responses, sse(gpt5Created, respDelta1, gpt5Done), true,
			Usage{Input: 30, Output: 200, Reasoning: 192, Model: "gpt-5-2025-08-07"}},
		{"responses stream cut: response.created's model", eventStream, Responses, sse(gpt5Created, respDelta1), false,
			Usage{Input: est, Output: 1, Model: "gpt-5", Estimated: true}},
		{"anthropic JSON: no reasoning apart", appJSON, Messages, anthropicJSON, true,
			Usage{Input: 3 + 1200 + 8000, Output: 503, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic stream: message_start's model", eventStream, Messages, anthropicStream, true,
			Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"realtime: no model on response.done", eventStream, Realtime, sse("data: " + realtimeDoneEvent), true,
			Usage{Input: 22, Output: 45, CacheRead: 8, AudioInput: 2, AudioOutput: 36}},
		// Hostile and odd values.
		{"a long model: its first 128 bytes", appJSON, ChatCompletions, chatWith(`"`+long+`"`, `{"prompt_tokens":1,"completion_tokens":1}`), true,
			Usage{Input: 1, Output: 1, Model: long[:128]}},
		{"odd bytes replaced", appJSON, ChatCompletions, chatWith(`"gpt 4o\n\"<b>\u00e9\u0000"`, `{"prompt_tokens":1,"completion_tokens":1}`), true,
			Usage{Input: 1, Output: 1, Model: "gpt_4o___b____"}},
		{"escapes read as what they stand for", appJSON, ChatCompletions, chatWith(`"gpt\u002d4o"`, `{"prompt_tokens":1,"completion_tokens":1}`), true,
			Usage{Input: 1, Output: 1, Model: "gpt-4o"}},
		{"a model not a string names none", appJSON, ChatCompletions, chatWith(`{"name":"x"}`, `{"prompt_tokens":1,"completion_tokens":1}`), true,
			Usage{Input: 1, Output: 1}},
		{"an empty model after one named changes nothing", eventStream, ChatCompletions, sse(azureContent, azureFilter, chunkDone), true,
			Usage{Input: est, Output: 2, Model: "gpt-4o-2024-11-20", Estimated: true}},
		{"a null or numeric model changes nothing", eventStream, ChatCompletions, sse(o3Chunk, `data: {"model":null,"choices":[]}`, `data: {"model":7,"choices":[]}`, chunkDone), true,
			Usage{Input: est, Output: 1, Tier: "default", Model: "o3-2025-04-16", Estimated: true}},
		{"reasoning over the output clamped", appJSON, ChatCompletions, chatWith(`"o3"`, `{"prompt_tokens":1,"completion_tokens":10,"completion_tokens_details":{"reasoning_tokens":50}}`), true,
			Usage{Input: 1, Output: 10, Reasoning: 10, Model: "o3"}},
		{"absurd reasoning clamped", appJSON, Responses, `{"model":"o3","usage":{"input_tokens":1,"output_tokens":10,"output_tokens_details":{"reasoning_tokens":1e300}}}`, true,
			Usage{Input: 1, Output: 10, Reasoning: 10, Model: "o3"}},
		{"negative reasoning ignored", appJSON, ChatCompletions, chatWith(`"o3"`, `{"prompt_tokens":1,"completion_tokens":10,"completion_tokens_details":{"reasoning_tokens":-5}}`), true,
			Usage{Input: 1, Output: 10, Model: "o3"}},
		{"reasoning not a number ignored", appJSON, Responses, `{"model":"o3","usage":{"input_tokens":1,"output_tokens":10,"output_tokens_details":{"reasoning_tokens":"9"}}}`, true,
			Usage{Input: 1, Output: 10, Model: "o3"}},
		{"reasoning without an output", appJSON, ChatCompletions, chatWith(`"o3"`, `{"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":5}}`), true,
			Usage{Input: 1, Model: "o3"}},
		{"a later usage without details replaces the reasoning", eventStream, Responses, sse(gpt5Created, strings.Replace(gpt5Done, `,"output_tokens_details":{"reasoning_tokens":192}`, "", 1)), true,
			Usage{Input: 30, Output: 200, Model: "gpt-5-2025-08-07"}},
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

// TestMeterModelOfLongAnswers: an answer or event too long to keep whole
// has its model read from its first bytes, where providers name it.
func TestMeterModelOfLongAnswers(t *testing.T) {
	pad := strings.Repeat("x", 3*windowSize)
	tests := []struct {
		name, contentType string
		api               API
		body              string
		want              string
	}{
		{"chat body", appJSON, ChatCompletions, `{"model":"o3-2025-04-16","choices":[{"message":{"content":"` + pad + `"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, "o3-2025-04-16"},
		{"chat body, the model after its content", appJSON, ChatCompletions, `{"choices":[{"message":{"content":"` + pad + `"}}],"usage":{"prompt_tokens":1,"completion_tokens":2},"model":"o3-tail"}`, "o3-tail"},
		{"embeddings body", appJSON, Embeddings, `{"object":"list","model":"text-embedding-3-large","data":[{"embedding":"` + pad + `"}],"usage":{"prompt_tokens":8}}`, "text-embedding-3-large"},
		{"responses body", appJSON, Responses, `{"id":"r","model":"gpt-5","output":[{"type":"message","content":[{"text":"` + pad + `"}]}],"usage":{"input_tokens":1,"output_tokens":2}}`, "gpt-5"},
		{"anthropic body", appJSON, Messages, `{"id":"m","type":"message","model":"claude-opus-4-1","content":[{"type":"text","text":"` + pad + `"}],"usage":{"input_tokens":1,"output_tokens":2}}`, "claude-opus-4-1"},
		{"chat chunk", eventStream, ChatCompletions, sse(`data: {"id":"c","model":"o3-2025-04-16","choices":[{"delta":{"content":"`+pad+`"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, chunkDone), "o3-2025-04-16"},
		{"responses terminal event", eventStream, Responses, sse("event: response.completed\n" + `data: {"type":"response.completed","response":{"id":"r","model":"gpt-5-2025-08-07","output":[{"type":"message","content":[{"text":"` + pad + `"}]}],"usage":{"input_tokens":1,"output_tokens":2}}}`), "gpt-5-2025-08-07"},
		{"anthropic message_start", eventStream, Messages, sse("event: message_start\n"+`data: {"type":"message_start","message":{"id":"m","model":"claude-opus-4-1","content":[{"type":"text","text":"`+pad+`"}],"usage":{"input_tokens":1,"output_tokens":1}}}`, antStop), "claude-opus-4-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := meter(tt.api, tt.contentType, est, tt.body, 4096, true); got.Model != tt.want {
				t.Errorf("model %q, want %q (%+v)", got.Model, tt.want, got)
			}
		})
	}
}

// TestMeterModelOwned: the model is copied out of the event buffer the
// Meter reuses, so later events cannot change it; and a stream naming the
// same model on every chunk allocates it once.
func TestMeterModelOwned(t *testing.T) {
	first := `data: {"model":"model-aaaa","choices":[]}`
	later := `data: {"zzzzz":"zzzzz-zzzz","choices":[]}`
	if got := meter(ChatCompletions, eventStream, est, sse(first, later, later, chunkDone), 0, true); got.Model != "model-aaaa" {
		t.Errorf("model %q, want model-aaaa", got.Model)
	}

	allocs := func(stream string) float64 {
		b := []byte(stream)
		return testing.AllocsPerRun(50, func() {
			m := NewMeter(ChatCompletions, eventStream, est)
			_, _ = m.Write(b)
			m.Finish(true)
		})
	}
	named, unnamed := chatStream50(), chatStream50()
	for i := range unnamed {
		unnamed[i] = strings.Replace(unnamed[i], `"model":"gpt-4.1-2025-04-14",`, "", 1)
	}
	if a, b := allocs(strings.Join(named, "")), allocs(strings.Join(unnamed, "")); a > b+1 {
		t.Errorf("a stream naming its model on 52 chunks: %v allocations, %v without it; want at most one more", a, b)
	}
}
