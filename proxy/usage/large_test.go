package usage

import (
	"fmt"
	"strings"
	"testing"
)

// wantHeld is the most a Meter may hold for one response, as its doc
// states: about 65 KiB, whatever the response.
const wantHeld = 66 << 10

// pad is n bytes of generated-looking text.
func pad(n int) string { return strings.Repeat("lorem ipsum ", n/12+1)[:n] }

// TestMeterLargeJSONUsageFromTail: an answer too large to keep whole has
// its usage read from its end, where providers put it — a 5 MiB answer
// whose usage says 1,000,000 output tokens was counted 0. Without usage,
// its output is estimated from its size, never 0. Only the top-level
// usage counts: one inside a string, a nested object or an escaped key
// does not.
func TestMeterLargeJSONUsageFromTail(t *testing.T) {
	big := pad(5 << 20)
	chat := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + big + `"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":1000000,"total_tokens":1000010},"service_tier":"default","system_fingerprint":"fp"}`
	chatNoUsage := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + big + `"},"finish_reason":"stop"}]}`
	responses := `{"id":"r","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"` + big + `"}]}],` +
		`"usage":{"input_tokens":36,"output_tokens":1000000,"total_tokens":1000036},"user":null,"metadata":{"usage":"{\"output_tokens\":1}","k":"v"}}`
	anthropic := `{"id":"m","type":"message","content":[{"type":"text","text":"` + big + `"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":3,"cache_creation_input_tokens":10,"cache_read_input_tokens":20,"output_tokens":1000000}}`
	vectors := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[` + strings.Repeat("0.0023064255,", 400000) + `0.1]}],"model":"text-embedding-3-small"`
	embeddings := vectors + `,"usage":{"prompt_tokens":8,"total_tokens":8}}`
	// The last "usage" in these bytes is not the top-level one.
	inString := `{"choices":[{"message":{"content":"` + big + `"}}],"usage":{"prompt_tokens":10,"completion_tokens":1000000},"note":"\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0}"}`
	nested := `{"choices":[{"message":{"content":"` + big + `"}}],"usage":{"prompt_tokens":10,"completion_tokens":1000000},"meta":{"usage":{"prompt_tokens":0,"completion_tokens":0}}}`
	escapedKey := `{"choices":[{"message":{"content":"` + big + `"}}],"usage":{"prompt_tokens":10,"completion_tokens":1000000},"meta":{"x\"usage":{"prompt_tokens":0}}}`
	onlyNested := `{"choices":[{"message":{"content":"` + big + `"}}],"meta":{"usage":{"prompt_tokens":0,"completion_tokens":0}}}`

	tests := []struct {
		name     string
		api      API
		body     string
		complete bool
		want     Usage
	}{
		{"chat", ChatCompletions, chat, true, Usage{Input: 10, Output: 1000000, Tier: "default"}},
		{"responses, a nested usage after it", Responses, responses, true, Usage{Input: 36, Output: 1000000}},
		{"anthropic", Messages, anthropic, true, Usage{Input: 33, Output: 1000000, CacheRead: 20, CacheWrite: 10}},
		{"embeddings", Embeddings, embeddings, true, Usage{Input: 8, Model: "text-embedding-3-small"}},
		{"usage in a string after it", ChatCompletions, inString, true, Usage{Input: 10, Output: 1000000}},
		{"usage in an object after it", ChatCompletions, nested, true, Usage{Input: 10, Output: 1000000}},
		{"escaped key after it", ChatCompletions, escapedKey, true, Usage{Input: 10, Output: 1000000}},
		{"no usage: estimated from the size", ChatCompletions, chatNoUsage, true, Usage{Input: est, Output: ceilQuarter(int64(len(chatNoUsage))), Estimated: true}},
		{"only a nested usage: estimated", ChatCompletions, onlyNested, true, Usage{Input: est, Output: ceilQuarter(int64(len(onlyNested))), Estimated: true}},
		{"cut short: estimated from the size", ChatCompletions, chat[:len(chat)-30], false, Usage{Input: est, Output: ceilQuarter(int64(len(chat) - 30)), Estimated: true}},
		{"embeddings without usage: no output", Embeddings, vectors + "}", true, Usage{Input: est, Model: "text-embedding-3-small", Estimated: true}},
	}
	for _, tt := range tests {
		for _, size := range []int{32 << 10, 4093, 0} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(tt.api, appJSON, est, tt.body, size, tt.complete); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// TestMeterLongEvents: an event too long to keep whole is still read: the
// usage of a Responses stream's terminal event (which repeats the whole
// answer) from its end, and a long delta's size as generated text.
func TestMeterLongEvents(t *testing.T) {
	big := pad(2 << 20)
	completed := "event: response.completed\n" + `data: {"type":"response.completed","sequence_number":7,"response":{"id":"r","object":"response","status":"completed",` +
		`"output":[{"type":"message","content":[{"type":"output_text","text":"` + big + `"}]}],"usage":{"input_tokens":37,"output_tokens":500000,"total_tokens":500037},"user":null,"metadata":{}}}`
	longChunk := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + big + `"},"finish_reason":null}]}`
	longData := int64(len(longChunk) - len("data: "))
	longAnt := "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + big + `"}}`
	tests := []struct {
		name     string
		api      API
		stream   string
		complete bool
		check    func(Usage) error
	}{
		{"responses terminal event", Responses, sse(respCreated, respDelta1, completed), true, exactly(Usage{Input: 37, Output: 500000, Model: "gpt-4.1-2025-04-14"})},
		{"responses terminal event without event lines", Responses, dropEventLines(sse(respCreated, respDelta1, completed)), true, exactly(Usage{Input: 37, Output: 500000, Model: "gpt-4.1-2025-04-14"})},
		{"chat long delta, usage after", ChatCompletions, sse(chunkHello, longChunk, chunkUsage, chunkDone), true, exactly(Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"})},
		{"chat long delta, no usage", ChatCompletions, sse(chunkHello, longChunk, chunkDone), true,
			between(ceilQuarter(int64(len(big))), ceilQuarter(longData+chatTextSize))},
		{"anthropic long delta, cut", Messages, sse(antStart, longAnt), false,
			between(ceilQuarter(int64(len(big))), ceilQuarter(int64(len(longAnt)))+1)},
	}
	for _, tt := range tests {
		for _, size := range []int{32 << 10, 4093, 0} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if err := tt.check(meter(tt.api, eventStream, est, tt.stream, size, tt.complete)); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// exactly checks a usage is want.
func exactly(want Usage) func(Usage) error {
	return func(got Usage) error {
		if got != want {
			return fmt.Errorf("got %+v, want %+v", got, want)
		}
		return nil
	}
}

// between checks a usage is estimated with an output in [lo, hi].
func between(lo, hi int64) func(Usage) error {
	return func(got Usage) error {
		if !got.Estimated || got.Output < lo || got.Output > hi {
			return fmt.Errorf("got %+v, want an estimated output in [%d, %d]", got, lo, hi)
		}
		return nil
	}
}

// TestMeterHoldsBoundedMemory: whatever the response, a Meter holds at
// most wantHeld bytes at any time — it kept up to 4 MiB of every JSON
// answer and 2 MiB of a stream's line and event, and 45 slow clients took
// the process from 15 to 229 MiB (issue 21 item 5). Written in 32 KiB
// pieces, as the reverse proxy copies.
func TestMeterHoldsBoundedMemory(t *testing.T) {
	huge := pad(8 << 20)
	tests := []struct {
		name        string
		api         API
		contentType string
		body        string
	}{
		{"JSON answer", ChatCompletions, appJSON, `{"choices":[{"message":{"content":"` + huge + `"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`},
		{"one long data line", Responses, eventStream, sse("event: response.completed\ndata: {\"response\":{\"x\":\"" + huge + "\"}}")},
		{"many data lines", Messages, eventStream, sse(strings.Repeat("data: "+pad(1000)+"\n", 8000))},
		{"long event name", Messages, eventStream, sse("event: " + huge + "\ndata: {}")},
		{"long comment", ChatCompletions, eventStream, sse(": " + huge)},
		{"long unknown field", ChatCompletions, eventStream, sse("x-field: " + huge)},
		{"long line without a colon", ChatCompletions, eventStream, sse(huge)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMeter(tt.api, tt.contentType, est)
			most := 0
			for p := []byte(tt.body); len(p) > 0; {
				n := min(32<<10, len(p))
				_, _ = m.Write(p[:n])
				p = p[n:]
				most = max(most, held(m))
			}
			if most > wantHeld {
				t.Errorf("held up to %d bytes, want at most %d", most, wantHeld)
			}
			_ = m.Finish(true)
		})
	}
}
