package usage

import (
	"strings"
	"testing"
)

// TestWriteEvent: a Responses stream's events, each a WebSocket
// message (pretty-printed, with line ends in its whitespace), read as
// the same events arriving as server-sent events are.
func TestWriteEvent(t *testing.T) {
	events := []string{
		`{"type":"response.created","response":{"service_tier":"default"}}`,
		`{"type":"response.output_text.delta","delta":"hello"}`,
		"{\r\n  \"type\": \"response.completed\",\n  \"response\": {\"usage\": {\"input_tokens\": 11,\n \"output_tokens\": 7,\r \"input_tokens_details\": {\"cached_tokens\": 4}}}\n}",
	}
	m := NewMeter(Responses, "text/event-stream", 99)
	for _, e := range events {
		m.WriteEvent([]byte(e))
	}
	u := m.Finish(true)
	if u.Estimated || m.Cut() || u.Input != 11 || u.Output != 7 || u.CacheRead != 4 || u.Tier != "default" {
		t.Errorf("usage = %+v cut %v, want the terminal event's 11/7, 4 cached, tier default", u, m.Cut())
	}
	cut := NewMeter(Responses, "text/event-stream", 99)
	cut.WriteEvent([]byte(events[1]))
	long := `{"type":"response.output_text.delta","delta":"` + strings.Repeat("x", 100<<10) + `"}`
	cut.WriteEvent([]byte(long))
	// A delta too long to keep counts all its bytes as text (an upper bound).
	if u := cut.Finish(false); !u.Estimated || !cut.Cut() || u.Input != 99 || u.Output != int64(5+len(long)+3)/4 {
		t.Errorf("cut usage = %+v, want the estimate: input 99, the text seen ÷ 4", u)
	}
}
