package usage

import (
	"fmt"
	"strings"
	"testing"
)

// Gemini API answers, as generateContent and streamGenerateContent send
// them (ai.google.dev/api/generate-content): a thinking model's, with
// cached content, streamed with alt=sse and as a JSON array.
const (
	geminiJSON = `{"candidates":[{"content":{"parts":[{"text":"Hello there, \"usageMetadata\" is 7."}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":11,"totalTokenCount":161,"cachedContentTokenCount":100,` +
		`"promptTokensDetails":[{"modality":"TEXT","tokenCount":120}],"thoughtsTokenCount":30},"modelVersion":"gemini-2.5-flash","responseId":"r1"}`
	geminiChunk1 = `{"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"},"index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"totalTokenCount":120,"cachedContentTokenCount":100},"modelVersion":"gemini-2.5-flash","responseId":"r1"}`
	geminiChunk2 = `{"candidates":[{"content":{"parts":[{"text":" there"}],"role":"model"},"index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":4,"totalTokenCount":154,"thoughtsTokenCount":30},"modelVersion":"gemini-2.5-flash","responseId":"r1"}`
	geminiChunk3 = `{"candidates":[{"content":{"parts":[{"text":", friend."}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":11,"totalTokenCount":161,"cachedContentTokenCount":100,"thoughtsTokenCount":30},"modelVersion":"gemini-2.5-flash","responseId":"r1"}`
	geminiBlocked = `{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9},"modelVersion":"gemini-2.0-flash"}`
	geminiToolUse = `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"q":"x"}}}]},"finishReason":"STOP"}],` +
		`"usageMetadata":{"promptTokenCount":50,"toolUsePromptTokenCount":20,"candidatesTokenCount":5,"totalTokenCount":75}}`
	geminiEmbedJSON = `{"embedding":{"values":[0.1,0.2,0.3]}}`
)

// geminiSSE frames responses as an alt=sse stream; geminiArray as the
// JSON array streamGenerateContent sends without it, laid out as Google
// lays it out (a "[{" first, ",\r\n" between).
func geminiSSE(responses ...string) string {
	var b strings.Builder
	for _, r := range responses {
		b.WriteString("data: " + r + "\r\n\r\n")
	}
	return b.String()
}

func geminiArray(responses ...string) string { return "[" + strings.Join(responses, "\n,\r\n") + "\n]" }

func TestMeterGemini(t *testing.T) {
	whole := Usage{Input: 120, Output: 41, Reasoning: 30, CacheRead: 100, Model: "gemini-2.5-flash"}
	text := ceilQuarter(int64(len("Hello there, friend.")))
	tests := []struct {
		name, contentType, body string
		api                     API
		complete                bool
		want                    Usage
	}{
		{"JSON", appJSON, geminiJSON, GenerateContent, true, whole},
		{"alt=sse stream: the last usage", eventStream, geminiSSE(geminiChunk1, geminiChunk2, geminiChunk3), GenerateContent, true, whole},
		{"alt=sse stream cut after its last chunk: whole", eventStream, geminiSSE(geminiChunk1, geminiChunk2, geminiChunk3), GenerateContent, false, whole},
		{"alt=sse stream cut before its finish: the better numbers, estimated", eventStream, geminiSSE(geminiChunk1, geminiChunk2), GenerateContent, false,
			Usage{Input: 120, Output: 34, Reasoning: 30, CacheRead: 100, Model: "gemini-2.5-flash", Estimated: true}},
		{"JSON array stream", appJSON, geminiArray(geminiChunk1, geminiChunk2, geminiChunk3), GenerateContent, true, whole},
		{"JSON array stream cut: estimated at its text", appJSON, geminiArray(geminiChunk1, geminiChunk2, geminiChunk3)[:200], GenerateContent, false,
			Usage{Input: est, Output: ceilQuarter(int64(len("Hello"))), Estimated: true}},
		{"JSON array whole but for its close", appJSON, strings.TrimSuffix(geminiArray(geminiChunk1, geminiChunk2, geminiChunk3), "]"), GenerateContent, true, whole},
		{"blocked prompt", eventStream, geminiSSE(geminiBlocked), GenerateContent, false, Usage{Input: 9, Model: "gemini-2.0-flash"}},
		{"tool use prompt is input", appJSON, geminiToolUse, GenerateContent, true, Usage{Input: 70, Output: 5}},
		{"no usage: its text", appJSON, `{"candidates":[{"content":{"parts":[{"text":"Hello there, friend."}]},"finishReason":"STOP"}]}`, GenerateContent, true,
			Usage{Input: est, Output: text, Estimated: true}},
		{"embedding without usage: the input estimate", appJSON, geminiEmbedJSON, EmbedContent, true, Usage{Input: est, Estimated: true}},
		{"embedding with usage: input only", appJSON, `{"embedding":{"values":[1]},"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":3}}`, EmbedContent, true,
			Usage{Input: 8}},
		{"counts of the wrong type are unknown", appJSON, `{"usageMetadata":{"promptTokenCount":"9","candidatesTokenCount":2}}`, GenerateContent, true, Usage{Output: 2}},
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

// TestMeterGeminiLarge: an answer or a chunk past the window is read
// from its ends, a JSON array stream's usage from its last element.
func TestMeterGeminiLarge(t *testing.T) {
	long := strings.Repeat("x", 2*windowSize)
	big := `{"candidates":[{"content":{"parts":[{"text":"` + long + `"}]},"index":0}],"modelVersion":"gemini-2.5-pro"}`
	want := Usage{Input: 120, Output: 41, Reasoning: 30, CacheRead: 100, Model: "gemini-2.5-flash"}
	for name, tt := range map[string]struct {
		contentType, body string
		want              Usage
	}{
		"JSON array with a long chunk": {appJSON, geminiArray(big, geminiChunk3), want},
		"JSON array, first chunk names the model": {appJSON, geminiArray(geminiChunk1, big, `{"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":3}}`),
			Usage{Input: 7, Output: 3, Model: "gemini-2.5-flash"}},
		"alt=sse with a long chunk": {eventStream, geminiSSE(geminiChunk1, big, geminiChunk3), want},
		"alt=sse whose long last chunk finishes": {eventStream, geminiSSE(geminiChunk1,
			`{"candidates":[{"content":{"parts":[{"text":"`+long+`"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":6},"modelVersion":"gemini-2.5-pro"}`),
			Usage{Input: 5, Output: 6, CacheRead: 5, Model: "gemini-2.5-pro"}},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewMeter(GenerateContent, tt.contentType, est)
			_ = writeChunks(m, []byte(tt.body), 4096)
			if n := held(m); n > maxHeld {
				t.Errorf("holding %d bytes, over %d", n, maxHeld)
			}
			if got := m.Finish(true); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
