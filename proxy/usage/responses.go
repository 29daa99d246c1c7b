package usage

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"
)

// The OpenAI Responses API reports
//
//	usage: {input_tokens, input_tokens_details, output_tokens, output_tokens_details, total_tokens}
//
// on the response object: the whole body, or, in a stream, the response of
// the terminal event; input_tokens includes cached tokens
// (input_tokens_details; see cache.go), output_tokens reasoning tokens
// (output_tokens_details.reasoning_tokens). The response object names its
// service tier (tier.go) and its model (model.go) too, in a stream on the
// response that response.created and response.in_progress repeat as well.

// The Responses stream events the meter reads: every response.*.delta
// event but the audio one generates text (output_text, refusal,
// function_call_arguments, reasoning_text, reasoning_summary_text,
// audio.transcript, code_interpreter_call_code, custom_tool_call_input,
// mcp_call_arguments, and those to come), and the terminal events carry
// the usage.
const (
	responsesEventPrefix = "response."
	responsesDeltaSuffix = ".delta"
	// responsesAudioDelta carries sound in base64, not text.
	responsesAudioDelta = "response.audio.delta"
	responsesCreated    = "response.created"
	responsesInProgress = "response.in_progress"
	responsesCompleted  = "response.completed"
	responsesIncomplete = "response.incomplete"
	responsesFailed     = "response.failed"
)

// responsesTierPath and responsesModelPath are where a Responses stream
// event's data names the service tier and the model: on the response
// object it repeats.
const (
	responsesTierPath  = "response." + tierMember
	responsesModelPath = "response." + modelMember
)

var responsesPrefix = []byte(`"response.`)

// responsesReader reads Responses API responses, over HTTP and, event
// by event, over a WebSocket (Meter.WriteEvent).
type responsesReader struct{}

// body reads a Responses API response: its usage, its service
// tier, its model, and what its output items generated for the estimate
// when it has none. The members are read in one pass; of a member repeated, the last
// counts, as when the usage of a long body is read from its end.
func (responsesReader) body(t *tally, body []byte) {
	gjson.Parse(view(body)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			responsesNames.record(t, value)
		case tierMember:
			t.noteTier(value)
		case modelMember:
			t.noteModel(value)
		case "output":
			value.ForEach(func(_, item gjson.Result) bool {
				t.text += responsesGenerated(item)
				return true
			})
		}
		return true
	})
}

// tail reads a Responses API response too large to keep: its usage,
// service tier and model, and all its bytes as generated text.
func (responsesReader) tail(t *tally, d *window) {
	responsesNames.record(t, tailUsage(d.tail(), 1))
	t.noteTier(tierIn(d, 1, tierMember))
	t.noteModel(modelIn(d, 1, modelMember))
	t.text = d.size
}

// responsesGenerated returns the bytes of text one output item of a
// Responses answer generated: a message's text and refusals, a reasoning
// item's summary and text, a function call's arguments, a custom tool
// call's input, a code interpreter call's code — what the stream's delta
// events carry. Names of tools are not counted: no delta carries them.
func responsesGenerated(item gjson.Result) int64 {
	var n int64
	item.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "arguments", "input", "code":
			n += strLen(v)
		case "content", "summary":
			v.ForEach(func(_, part gjson.Result) bool {
				n += strLen(part.Get("text")) + strLen(part.Get("refusal"))
				return true
			})
		}
		return true
	})
	return n
}

// event reads one event of a Responses API stream. The event type
// is the event: field, or the data's "type" when that field is missing.
func (r responsesReader) event(t *tally, name, data []byte) {
	if len(name) == 0 && !bytes.Contains(data, responsesPrefix) {
		return
	}
	switch et := eventType(name, data); et {
	case responsesCompleted, responsesIncomplete, responsesFailed:
		t.terminal = true
		r.object(t, gjson.Get(view(data), "response"))
	case responsesCreated, responsesInProgress:
		r.object(t, gjson.Get(view(data), "response"))
	default:
		if isResponsesDelta(et) {
			t.text += strLen(gjson.Get(view(data), "delta"))
		}
	}
}

// object reads the response object a stream event repeats, in
// one pass over its members: its usage (on a terminal event; null before),
// its service tier and its model.
func (responsesReader) object(t *tally, resp gjson.Result) {
	resp.ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			responsesNames.record(t, value)
		case tierMember:
			t.noteTier(value)
		case modelMember:
			t.noteModel(value)
		}
		return true
	})
}

// isResponsesDelta reports whether a Responses stream event type is one
// whose delta is generated text: response.*.delta but the audio.
func isResponsesDelta(t string) bool {
	return strings.HasPrefix(t, responsesEventPrefix) && strings.HasSuffix(t, responsesDeltaSuffix) && t != responsesAudioDelta
}

// longEvent reads a Responses event whose data outgrew its window: a
// terminal event's usage from the end of the response it repeats (a
// member of the data's response object: depth 2), the service tier and
// model of that response likewise, a delta's bytes as text.
func (responsesReader) longEvent(t *tally, name []byte, d *window) {
	switch et := eventType(name, d.start()); {
	case et == responsesCompleted || et == responsesIncomplete || et == responsesFailed:
		t.terminal = true
		responsesNames.record(t, tailUsage(d.tail(), 2))
		t.noteTier(tierIn(d, 2, responsesTierPath))
		t.noteModel(modelIn(d, 2, responsesModelPath))
	case et == responsesCreated || et == responsesInProgress:
		t.noteTier(tierIn(d, 2, responsesTierPath))
		t.noteModel(modelIn(d, 2, responsesModelPath))
	case isResponsesDelta(et):
		t.text += d.size
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
