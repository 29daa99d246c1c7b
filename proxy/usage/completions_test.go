package usage

import (
	"fmt"
	"testing"
)

// Legacy completions (/v1/completions), as OpenAI answers them: the text
// in each choice's text, Chat Completions' usage.
const (
	completionJSON = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"gpt-3.5-turbo-instruct",` +
		`"choices":[{"text":"Once upon a time","index":0,"logprobs":null,"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`
	completionJSONNoUsage = `{"id":"cmpl-1","object":"text_completion","choices":[{"text":"Once upon a time","index":0},{"text":", twice","index":1}]}`
	completionChunk1      = `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"Once upon","index":0,"finish_reason":null}],"usage":null}`
	completionChunk2      = `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":" a time","index":0,"finish_reason":"length"}],"usage":null}`
	completionUsageChunk  = `data: {"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`
)

// TestMeterCompletions: a legacy completion reports its usage as Chat
// Completions do, JSON or streamed; without one, the text its choices
// generated is the estimate's output (Chat Completions' readers counted
// only a message's, so a completion without usage was estimated at no
// output at all).
func TestMeterCompletions(t *testing.T) {
	text := ceilQuarter(int64(len("Once upon a time")))
	tests := []struct {
		name, contentType, body string
		complete                bool
		want                    Usage
	}{
		{"JSON", appJSON, completionJSON, true, Usage{Input: 5, Output: 4, Model: "gpt-3.5-turbo-instruct"}},
		{"JSON without usage: its choices' text", appJSON, completionJSONNoUsage, true,
			Usage{Input: est, Output: ceilQuarter(int64(len("Once upon a time, twice"))), Estimated: true}},
		{"stream with usage", eventStream, sse(completionChunk1, completionChunk2, completionUsageChunk, chunkDone), true, Usage{Input: 5, Output: 4}},
		{"stream without usage: its text", eventStream, sse(completionChunk1, completionChunk2, chunkDone), true, Usage{Input: est, Output: text, Estimated: true}},
		{"stream cut", eventStream, sse(completionChunk1, completionChunk2), false, Usage{Input: est, Output: text, Estimated: true}},
	}
	for _, tt := range tests {
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(Completions, tt.contentType, est, tt.body, size, tt.complete); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}
