package usage

import (
	"fmt"
	"strings"
	"testing"
)

// Chunks of a chat completions stream that generate something other than
// delta.content: tool calls, reasoning (DeepSeek's reasoning_content,
// vLLM's and OpenRouter's reasoning), a refusal, a legacy function call
// and an audio transcript.
const (
	chunkToolStart  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`
	chunkToolArgs1  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":"}}]},"finish_reason":null}]}`
	chunkToolArgs2  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}},{"index":1,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`
	chunkReasoning  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"Let me think."},"finish_reason":null}]}`
	chunkReasoning2 = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning":"Step two."},"finish_reason":null}]}`
	chunkRefusal    = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"refusal":"I can't help."},"finish_reason":null}]}`
	chunkFuncCall   = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"function_call":{"name":"lookup","arguments":"{\"q\":1}"}},"finish_reason":null}]}`
	chunkAudio      = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"audio":{"id":"a1","transcript":"Hi!","data":"UklGRg=="}},"finish_reason":null}]}`
	// chatStreamGenerated is the bytes the chunks above generate: the audio data
	// is sound, not text, and is not counted.
	chatStreamGenerated = len("get_weather") + len(`{"location":`) + len(`"Paris"}`) + len(`{}`) + len("Let me think.") +
		len("Step two.") + len("I can't help.") + len("lookup") + len(`{"q":1}`) + len("Hi!")
)

// The same as one chat completion without usage.
const chatJSONNoUsage = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","reasoning_content":"Let me think.","reasoning":"Step two.","refusal":"I can't help.",` +
	`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}],"function_call":{"name":"lookup","arguments":"{\"q\":1}"},"audio":{"transcript":"Hi!","data":"UklGRg=="}},"finish_reason":"stop"}]}`

const chatJSONGenerated = len("Hello") + len("Let me think.") + len("Step two.") + len("I can't help.") + len("get_weather") +
	len(`{"location":"Paris"}`) + len("lookup") + len(`{"q":1}`) + len("Hi!")

// Responses API delta events of every kind that generates text.
func respDelta(kind, delta string) string {
	return "event: response." + kind + ".delta\n" + `data: {"type":"response.` + kind + `.delta","sequence_number":9,"item_id":"it_1","output_index":0,"delta":"` + delta + `"}`
}

var (
	respGenerated = []string{
		respDelta("function_call_arguments", `{\"city\":\"Paris\"}`),
		respDelta("reasoning_summary_text", "Thinking about it."),
		respDelta("reasoning_text", "Raw thoughts."),
		respDelta("refusal", "No."),
		respDelta("custom_tool_call_input", "print(1)"),
		respDelta("code_interpreter_call_code", "x = 2"),
		respDelta("audio.transcript", "Spoken."),
	}
	respGeneratedSize = len(`{"city":"Paris"}`) + len("Thinking about it.") + len("Raw thoughts.") + len("No.") +
		len("print(1)") + len("x = 2") + len("Spoken.")
	// respAudio is sound, base64: not counted as text.
	respAudio = respDelta("audio", "UklGRiQAAABXQVZF")
)

// A Responses API answer without usage, with every kind of output item.
const responsesJSONNoUsage = `{"id":"resp_1","object":"response","status":"completed","output":[` +
	`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Thinking about it."}],"content":[{"type":"reasoning_text","text":"Raw thoughts."}]},` +
	`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
	`{"type":"custom_tool_call","id":"ct_1","name":"run","input":"print(1)"},` +
	`{"type":"code_interpreter_call","id":"ci_1","code":"x = 2"},` +
	`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi there!"},{"type":"refusal","refusal":"No."}]}]}`

// responsesJSONGenerated is what it generated; the names of the tools
// called are not counted (a stream has them in no delta either).
const responsesJSONGenerated = len("Thinking about it.") + len("Raw thoughts.") + len(`{"city":"Paris"}`) +
	len("print(1)") + len("x = 2") + len("Hi there!") + len("No.")

// Anthropic content block deltas of every kind.
func antBlockDelta(delta string) string {
	return "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":` + delta + `}`
}

var (
	antThinking  = antBlockDelta(`{"type":"thinking_delta","thinking":"I need to add."}`)
	antSignature = antBlockDelta(`{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}`)
	antToolInput = antBlockDelta(`{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}`)
	antCitation  = antBlockDelta(`{"type":"citations_delta","citation":{"type":"char_location","cited_text":"The grass is green."}}`)
	// antGenerated is what the deltas above generate: the signature and
	// the citation are not generated text.
	antGenerated = len("I need to add.") + len(`{"location": "San Fra`)
)

// An Anthropic answer without usage, with thinking, text and a tool call.
const anthropicJSONNoUsage = `{"id":"msg_1","type":"message","role":"assistant","content":[` +
	`{"type":"thinking","thinking":"I need to add.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},` +
	`{"type":"text","text":"Hello"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}}],"stop_reason":"tool_use"}`

// anthropicJSONGenerated is what it generated: the tool's name is not
// counted (a stream has it in no delta either), the signature neither.
const anthropicJSONGenerated = len("I need to add.") + len("Hello") + len(`{"location":"Paris"}`)

// TestMeterCountsEveryGeneratedDelta: when a response carries no usage, or
// is cut before it, the estimate counts everything the model generated —
// tool-call arguments, reasoning, refusals — not only the visible text (80
// KB of tool arguments once settled a window to 15 tokens).
func TestMeterCountsEveryGeneratedDelta(t *testing.T) {
	q := func(n int) int64 { return ceilQuarter(int64(n)) }
	tests := []struct {
		name        string
		api         API
		contentType string
		body        string
		complete    bool
		want        Usage
	}{
		{"chat stream without usage", ChatCompletions, eventStream,
			sse(chunkRole, chunkToolStart, chunkToolArgs1, chunkToolArgs2, chunkReasoning, chunkReasoning2, chunkRefusal, chunkFuncCall, chunkAudio, chunkDone),
			true, Usage{Input: est, Output: q(chatStreamGenerated), Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat stream cut", ChatCompletions, eventStream,
			sse(chunkHello, chunkToolStart, chunkToolArgs1, chunkToolArgs2, chunkReasoning, chunkReasoning2, chunkRefusal, chunkFuncCall, chunkAudio),
			false, Usage{Input: est, Output: q(chatStreamGenerated + len("Hello")), Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat JSON without usage", ChatCompletions, appJSON, chatJSONNoUsage, true,
			Usage{Input: est, Output: q(chatJSONGenerated), Estimated: true}},
		{"responses stream cut", Responses, eventStream,
			sse(append(append([]string{respCreated, respDelta1}, respGenerated...), respAudio)...),
			false, Usage{Input: est, Output: q(respGeneratedSize + len("Hi")), Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"responses JSON without usage", Responses, appJSON, responsesJSONNoUsage, true,
			Usage{Input: est, Output: q(responsesJSONGenerated), Estimated: true}},
		{"anthropic stream cut", Messages, eventStream,
			sse(antStart, antBlockStart, antThinking, antSignature, antDelta1, antToolInput, antCitation),
			false, Usage{Input: antInput, Output: q(antGenerated + len("Hello")), CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929", Estimated: true}},
		{"anthropic JSON without usage", Messages, appJSON, anthropicJSONNoUsage, true,
			Usage{Input: est, Output: q(anthropicJSONGenerated), Estimated: true}},
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

// TestMeterToolArgumentsAtVolume is the review's case: a stream of 80 KB
// of tool-call arguments and no usage is about 20,000 tokens, not 0.
func TestMeterToolArgumentsAtVolume(t *testing.T) {
	events := []string{chunkRole, chunkToolStart}
	piece := strings.Repeat("a", 1000)
	for range 80 {
		events = append(events, strings.Replace(chunkToolArgs1, `{\"location\":`, piece, 1))
	}
	got := meter(ChatCompletions, eventStream, 15, sse(append(events, chunkDone)...), 0, true)
	if want := ceilQuarter(int64(80*len(piece) + len("get_weather"))); got.Output != want || !got.Estimated {
		t.Errorf("got %+v, want an estimated output of %d", got, want)
	}
}
