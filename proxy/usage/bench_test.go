package usage

import (
	"fmt"
	"strings"
	"testing"
)

// chatStream50 is a 50-chunk chat completions stream ending with usage.
func chatStream50() []string {
	events := make([]string, 0, 52)
	for i := range 50 {
		events = append(events, sse(strings.Replace(chunkHello, `"Hello"`, fmt.Sprintf(`"token %d\n"`, i), 1)))
	}
	return append(events, sse(chunkUsage), sse(chunkDone))
}

// BenchmarkMeterChatStream meters a 50-chunk stream written one event per
// Write, as events arrive from the network.
func BenchmarkMeterChatStream(b *testing.B) {
	var events [][]byte
	size := 0
	for _, e := range chatStream50() {
		events = append(events, []byte(e))
		size += len(e)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		m := NewMeter(ChatCompletions, eventStream, 100)
		for _, e := range events {
			_, _ = m.Write(e)
		}
		if u := m.Finish(true); u.Estimated {
			b.Fatalf("estimated: %+v", u)
		}
	}
}

// BenchmarkMeterJSON meters a chat completion body in one Write.
func BenchmarkMeterJSON(b *testing.B) {
	body := []byte(chatJSON)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		m := NewMeter(ChatCompletions, appJSON, 100)
		_, _ = m.Write(body)
		if u := m.Finish(true); u.Estimated {
			b.Fatalf("estimated: %+v", u)
		}
	}
}

// BenchmarkStripUsageChunk passes a 50-chunk stream through the stripper.
func BenchmarkStripUsageChunk(b *testing.B) {
	var events [][]byte
	size := 0
	for _, e := range chatStream50() {
		events = append(events, []byte(e))
		size += len(e)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		w := StripUsageChunk(discard{})
		for _, e := range events {
			_, _ = w.Write(e)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
