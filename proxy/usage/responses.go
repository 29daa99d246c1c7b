package usage

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// The OpenAI Responses API reports
//
//	usage: {input_tokens, input_tokens_details, output_tokens, output_tokens_details, total_tokens}
//
// on the response object: the whole body, or, in a stream, the response of
// the terminal event.

// The Responses stream events the meter reads.
const (
	responsesTextDelta  = "response.output_text.delta"
	responsesCompleted  = "response.completed"
	responsesIncomplete = "response.incomplete"
	responsesFailed     = "response.failed"
)

var responsesPrefix = []byte(`"response.`)

// responsesBody reads a Responses API response.
func (m *Meter) responsesBody(body []byte) {
	m.responsesUsage(gjson.Get(view(body), "usage"))
}

// responsesEvent reads one event of a Responses API stream. The event type
// is the event: field, or the data's "type" when that field is missing.
func (m *Meter) responsesEvent(name, data []byte) {
	if len(name) == 0 && !bytes.Contains(data, responsesPrefix) {
		return
	}
	switch eventType(name, data) {
	case responsesTextDelta:
		m.text += int64(len(gjson.Get(view(data), "delta").Str))
	case responsesCompleted, responsesIncomplete, responsesFailed:
		m.terminal = true
		m.responsesUsage(gjson.Get(view(data), "response.usage"))
	}
}

// eventType returns an event's type: its event: field, or the data's "type"
// when that field is missing. The string is valid only during the call.
func eventType(name, data []byte) string {
	if len(name) > 0 {
		return view(name)
	}
	return gjson.Get(view(data), "type").Str
}

// responsesUsage records a usage object of the Responses shape.
func (m *Meter) responsesUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	if in := u.Get("input_tokens"); in.Type == gjson.Number {
		m.setIn(count(in))
	}
	if out := u.Get("output_tokens"); out.Type == gjson.Number {
		m.setOut(count(out))
	}
}
