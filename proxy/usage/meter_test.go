package usage

import (
	"fmt"
	"strings"
	"testing"
)

const (
	eventStream = "text/event-stream"
	appJSON     = "application/json"
	est         = 1000 // the input estimate the tests pass
)

func TestMeterJSON(t *testing.T) {
	huge := `{"pad":"` + strings.Repeat("x", 4<<20) + `",` + chatJSON[1:]
	tests := []struct {
		name        string
		api         API
		contentType string
		body        string
		complete    bool
		want        Usage
	}{
		{"chat", ChatCompletions, appJSON, chatJSON, true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat charset", ChatCompletions, "application/json; charset=utf-8", chatJSON, true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"embeddings", Embeddings, appJSON, embeddingsJSON, true, Usage{Input: 8, Model: "text-embedding-3-small"}},
		{"embeddings output ignored", Embeddings, appJSON, `{"usage":{"prompt_tokens":8,"completion_tokens":3}}`, true, Usage{Input: 8}},
		{"responses", Responses, appJSON, responsesJSON, true, Usage{Input: 36, Output: 87, Model: "gpt-4.1-2025-04-14"}},
		{"anthropic input is the sum of three fields", Messages, appJSON, anthropicJSON, true, Usage{Input: 3 + 1200 + 8000, Output: 503, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"error body", ChatCompletions, appJSON, openAIErrorJSON, true, Usage{Input: est, Estimated: true}},
		{"usage null", ChatCompletions, appJSON, `{"choices":[],"usage":null}`, true, Usage{Input: est, Estimated: true}},
		{"usage without counts", ChatCompletions, appJSON, `{"usage":{"total_tokens":5}}`, true, Usage{Input: est, Estimated: true}},
		// A body cut short: its usage is not trusted, what it generated so far counts.
		{"cut short", ChatCompletions, appJSON, chatJSON, false, Usage{Input: est, Output: ceilQuarter(int64(len(`Hello! The "usage" of tokens is 7.`))), Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"cut short mid-body", Messages, appJSON, anthropicJSON[:len(anthropicJSON)/2], false, Usage{Input: est, Output: ceilQuarter(int64(len("Hi! My name is Claude."))), Model: "claude-sonnet-4-5-20250929", Estimated: true}},
		{"over 4 MiB: usage from its end", ChatCompletions, appJSON, huge, true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"not JSON", ChatCompletions, "text/plain", "upstream connect error", true, Usage{Input: est, Estimated: true}},
		{"empty", Responses, appJSON, "", true, Usage{Input: est, Estimated: true}},
		{"other API not read", Other, appJSON, chatJSON, true, Usage{Input: est, Estimated: true}},
		{"wrong API's fields", Responses, appJSON, chatJSON, true, Usage{Input: est, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"negative counts", ChatCompletions, appJSON, `{"usage":{"prompt_tokens":-5,"completion_tokens":2.9}}`, true, Usage{Input: 0, Output: 2}},
		{"absurd counts capped", ChatCompletions, appJSON, `{"usage":{"prompt_tokens":1e300,"completion_tokens":1e300}}`, true, Usage{Input: maxCount, Output: maxCount}},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 4096, 0} {
			if size == 1 && len(tt.body) > 1<<16 {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				got := meter(tt.api, tt.contentType, est, tt.body, size, tt.complete)
				if got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

func TestMeterStream(t *testing.T) {
	chatText, respText, antText := ceilQuarter(chatTextSize), ceilQuarter(respTextSize), ceilQuarter(antTextSize)
	tests := []struct {
		name     string
		api      API
		stream   string
		complete bool
		want     Usage
	}{
		// OpenAI chat completions.
		{"chat usage chunk", ChatCompletions, chatStreamUsage, true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat CRLF", ChatCompletions, crlf(chatStreamUsage), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat lone CR", ChatCompletions, cr(chatStreamUsage), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat data: without space", ChatCompletions, nospace(chatStreamUsage), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat comments", ChatCompletions, sse(": keep-alive", chunkHello, ":", chunkUsage, chunkDone), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat without usage", ChatCompletions, chatStreamNoUsage, true, Usage{Input: est, Output: chatText, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat [DONE] missing", ChatCompletions, chatStreamNoDone, true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat not complete after [DONE]", ChatCompletions, chatStreamUsage, false, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		// A whole stream that reported half its usage (no prompt_tokens) is
		// not taken at its word: the input is the estimate (it was 0).
		{"chat usage without its input", ChatCompletions, sse(chunkRole, chunkHello, chunkWorld, chunkStop,
			`data: {"model":"gpt-4.1-2025-04-14","service_tier":"default","choices":[],"usage":{"completion_tokens":10}}`, chunkDone),
			true, Usage{Input: est, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat truncated", ChatCompletions, chatStreamCut, false, Usage{Input: est, Output: chatText, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat truncated mid-event", ChatCompletions, chatStreamUsage[:len(chatStreamUsage)-40], false, Usage{Input: est, Output: chatText, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat last blank line missing", ChatCompletions, strings.TrimSuffix(chatStreamUsage, "\n"), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		{"chat last line cut", ChatCompletions, strings.TrimSuffix(chatStreamUsage, "\n\n"), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"chat multi-line data", ChatCompletions, sse(chunkHello, strings.Replace(chunkUsage, `,"usage":`, ",\ndata: \"usage\":", 1), chunkDone), true, Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}},
		// Azure's first chunk has empty choices and no usage.
		{"azure filter chunk is not usage", ChatCompletions, azureStreamNoUsage, true, Usage{Input: est, Output: ceilQuarter(int64(len("Hi there"))), Model: "gpt-4o-2024-11-20", Estimated: true}},
		{"azure usage", ChatCompletions, azureStreamUsage, true, Usage{Input: 12, Output: 2, Model: "gpt-4o-2024-11-20"}},
		// vLLM continuous usage: the high-water mark, never a sum.
		{"vllm continuous usage", ChatCompletions, vllmStream, true, Usage{Input: 40, Output: 3, Model: "meta-llama/Llama-3.1-8B-Instruct"}},
		{"vllm truncated", ChatCompletions, vllmStreamCut, false, Usage{Input: 40, Output: 2, Model: "meta-llama/Llama-3.1-8B-Instruct", Estimated: true}},
		{"vllm late chunk lower", ChatCompletions, sse(vllm1, vllm4, vllm2, chunkDone), true, Usage{Input: 40, Output: 3, Model: "meta-llama/Llama-3.1-8B-Instruct"}},
		// OpenAI Responses API.
		{"responses completed", Responses, responsesStream, true, Usage{Input: 37, Output: 11, Model: "gpt-4.1-2025-04-14"}},
		{"responses CRLF", Responses, crlf(responsesStream), true, Usage{Input: 37, Output: 11, Model: "gpt-4.1-2025-04-14"}},
		{"responses without event lines", Responses, dropEventLines(responsesStream), true, Usage{Input: 37, Output: 11, Model: "gpt-4.1-2025-04-14"}},
		{"responses incomplete", Responses, responsesStreamIncomplete, true, Usage{Input: 37, Output: 16, Model: "gpt-4.1-2025-04-14"}},
		{"responses failed without usage", Responses, responsesStreamFailed, true, Usage{Input: est, Output: respText, Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"responses truncated", Responses, responsesStreamCut, false, Usage{Input: est, Output: respText, Model: "gpt-4.1-2025-04-14", Estimated: true}},
		{"responses not complete after response.completed", Responses, responsesStream, false, Usage{Input: 37, Output: 11, Model: "gpt-4.1-2025-04-14"}},
		// Anthropic Messages.
		{"anthropic", Messages, anthropicStream, true, Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic not complete after message_stop", Messages, anthropicStream, false, Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic CRLF", Messages, crlf(anthropicStream), true, Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic without event lines", Messages, dropEventLines(anthropicStream), true, Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic unknown events ignored", Messages, sse(antStart, antUnknown, antDelta1, antMsgDelta1, antUnknown, antStop), true, Usage{Input: antInput, Output: 10, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}},
		{"anthropic error after 200", Messages, anthropicStreamError, true, Usage{Input: antInput, Output: max(1, antText), CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929", Estimated: true}},
		{"anthropic truncated keeps message_start input", Messages, anthropicStreamCut, false, Usage{Input: antInput, Output: 10, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929", Estimated: true}},
		{"anthropic message_stop missing", Messages, sse(antStart, antDelta1, antMsgDelta2), true, Usage{Input: antInput, Output: 15, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929", Estimated: true}},
		// Streams of an API that does not stream, and of Other.
		{"embeddings stream", Embeddings, chatStreamUsage, true, Usage{Input: est, Estimated: true}},
		{"other stream", Other, chatStreamUsage, true, Usage{Input: est, Estimated: true}},
		{"empty stream", ChatCompletions, "", true, Usage{Input: est, Estimated: true}},
	}
	for _, tt := range tests {
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				got := meter(tt.api, eventStream, est, tt.stream, size, tt.complete)
				if got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

// dropEventLines removes the event: lines, leaving the data's "type".
func dropEventLines(stream string) string {
	lines := strings.SplitAfter(stream, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, "event:") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "")
}

func TestMeterAnthropicCumulative(t *testing.T) {
	delta := func(usage string) string {
		return "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":` + usage + `}`
	}
	start := "event: message_start\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}`
	tests := []struct {
		name   string
		deltas []string
		want   Usage
	}{
		{"output replaced, not added", []string{delta(`{"output_tokens":10}`), delta(`{"output_tokens":15}`)}, Usage{Input: 1125, Output: 15, CacheRead: 1000, CacheWrite: 100}},
		{"input kept when absent", []string{delta(`{"output_tokens":7}`)}, Usage{Input: 1125, Output: 7, CacheRead: 1000, CacheWrite: 100}},
		{"input field replaced when present", []string{delta(`{"input_tokens":30,"output_tokens":7}`)}, Usage{Input: 1130, Output: 7, CacheRead: 1000, CacheWrite: 100}},
		{"null field kept", []string{delta(`{"cache_read_input_tokens":null,"output_tokens":7}`)}, Usage{Input: 1125, Output: 7, CacheRead: 1000, CacheWrite: 100}},
		{"all replaced", []string{delta(`{"input_tokens":1,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":4}`)}, Usage{Input: 6, Output: 4, CacheRead: 3, CacheWrite: 2}},
		{"no delta", nil, Usage{Input: 1125, Output: 1, CacheRead: 1000, CacheWrite: 100}},
	}
	for _, tt := range tests {
		stream := sse(append(append([]string{start}, tt.deltas...), antStop)...)
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				if got := meter(Messages, eventStream, est, stream, size, true); got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

func TestMeterBounds(t *testing.T) {
	t.Run("long line skipped", func(t *testing.T) {
		long := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 3<<20) + `"}}]}`
		stream := sse(chunkHello, long, chunkUsage, chunkDone)
		for _, size := range []int{4096, 0} {
			m := NewMeter(ChatCompletions, eventStream, est)
			for p := []byte(stream); len(p) > 0; {
				n := len(p)
				if size > 0 {
					n = min(size, len(p))
				}
				_, _ = m.Write(p[:n])
				p = p[n:]
				if n := held(m); n > maxHeld {
					t.Fatalf("size %d: holding %d bytes", size, n)
				}
			}
			if got, want := m.Finish(true), (Usage{Input: 19, Output: 10, Tier: "default", Model: "gpt-4.1-2025-04-14"}); got != want {
				t.Errorf("size %d: got %+v, want %+v", size, got, want)
			}
		}
	})
	t.Run("many data lines", func(t *testing.T) {
		m := NewMeter(Messages, eventStream, est)
		line := []byte("data: " + strings.Repeat("y", 1000) + "\n")
		for range (3 << 20) / len(line) {
			_, _ = m.Write(line)
		}
		if n := held(m); n > maxHeld {
			t.Fatalf("holding %d bytes", n)
		}
		_, _ = m.Write([]byte("\n" + sse(antStart, antStop)))
		if got, want := m.Finish(true), (Usage{Input: antInput, Output: 1, CacheRead: 8000, CacheWrite: 1200, Tier: "standard", Model: "claude-sonnet-4-5-20250929"}); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}

func TestMeterFinish(t *testing.T) {
	m := NewMeter(ChatCompletions, eventStream, est)
	_, _ = m.Write([]byte(chatStreamUsage))
	first := m.Finish(true)
	if n, err := m.Write([]byte(sse(vllm5))); n != len(sse(vllm5)) || err != nil {
		t.Errorf("Write after Finish = %d, %v", n, err)
	}
	if again := m.Finish(false); again != first {
		t.Errorf("second Finish = %+v, first %+v", again, first)
	}
	var zero Meter
	if got := zero.Finish(true); got != (Usage{Estimated: true}) {
		t.Errorf("zero Meter: %+v", got)
	}
	if got := NewMeter(Responses, appJSON, -5).Finish(true); got != (Usage{Estimated: true}) {
		t.Errorf("negative estimate: %+v", got)
	}
}

func TestUsageTotal(t *testing.T) {
	if got := (Usage{Input: 3, Output: 4}).Total(); got != 7 {
		t.Errorf("Total = %d", got)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                 true,
		"text/event-stream; charset=utf-8":  true,
		" Text/Event-Stream ;charset=utf-8": true,
		"application/json":                  false,
		"":                                  false,
		"text/event-streams":                false,
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v", ct, got)
		}
	}
}

// TestMeterCut: Cut says a response ended before its end — a stream whose
// terminal event never came or that did not end cleanly, a JSON body cut
// short — and not one that ended whole, with its usage or without.
func TestMeterCut(t *testing.T) {
	for _, tt := range []struct {
		name        string
		api         API
		contentType string
		body        string
		complete    bool
		want        bool
	}{
		{"stream with usage", ChatCompletions, eventStream, chatStreamUsage, true, false},
		{"stream without usage, whole", ChatCompletions, eventStream, chatStreamNoUsage, true, false},
		{"stream without its terminal event", ChatCompletions, eventStream, chatStreamNoDone, true, true},
		{"stream cut at EOF", ChatCompletions, eventStream, chatStreamCut, true, true},
		{"stream closed before EOF, after its terminal event", ChatCompletions, eventStream, chatStreamUsage, false, false},
		{"stream closed before its terminal event", ChatCompletions, eventStream, chatStreamNoDone, false, true},
		{"JSON body", ChatCompletions, appJSON, chatJSON, true, false},
		{"JSON body cut short", ChatCompletions, appJSON, chatJSON[:40], false, true},
		{"JSON body without usage, whole", Responses, appJSON, `{"id":"resp_1","status":"queued","usage":null}`, true, false},
		{"not read", Other, appJSON, `{}`, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMeter(tt.api, tt.contentType, 10)
			if m.Cut() {
				t.Fatal("Cut before Finish")
			}
			_, _ = m.Write([]byte(tt.body))
			u := m.Finish(tt.complete)
			if m.Cut() != tt.want || (m.Cut() && !u.Estimated) {
				t.Errorf("Cut() = %v with %+v, want %v (and Estimated when cut)", m.Cut(), u, tt.want)
			}
		})
	}
}
