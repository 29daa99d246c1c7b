package usage

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Anthropic Messages report
//
//	usage: {input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens, …}
//
// where input_tokens counts only the tokens after the last cache breakpoint:
// the whole input is the sum of the three input fields. A stream reports
// usage in message_start (message.usage) and then in one or more
// message_delta events whose usage is cumulative: each count present
// replaces the one before, none is added. The usage names the service
// tier too (service_tier: "standard", "priority", "batch"; tier.go), and
// the message its model (model.go): the body's top-level model, a
// stream's in message_start's message. Thinking is output, not reported
// apart: a Messages usage has no reasoning part (Usage.Reasoning 0).

// The Messages stream events the meter reads; ping, error and unknown events
// are ignored (an error event after the 200 is not usage).
const (
	anthropicMessageStart = "message_start"
	anthropicMessageDelta = "message_delta"
	anthropicMessageStop  = "message_stop"
	anthropicBlockDelta   = "content_block_delta"
)

var (
	anthropicMessagePrefix = []byte(`"message_`)
	anthropicBlockDeltaKey = []byte(`"content_block_delta"`)
)

// anthropicInput holds the three parts of an Anthropic input count.
type anthropicInput struct {
	uncached, cacheWrite, cacheRead int64
}

// anthropicReader reads Anthropic Messages responses.
type anthropicReader struct{}

// body reads a Messages response: its usage, its model, and
// what its content blocks generated for the estimate when it has none.
// The members are read in one pass; of a member repeated, the last
// counts.
func (r anthropicReader) body(t *tally, body []byte) {
	gjson.Parse(view(body)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			r.usage(t, value)
		case modelMember:
			t.noteModel(value)
		case "content":
			value.ForEach(func(_, block gjson.Result) bool {
				t.text += anthropicGenerated(block)
				return true
			})
		}
		return true
	})
}

// tail reads a Messages response too large to keep: its usage (and with
// it the service tier) and its model, and all its bytes as generated
// text.
func (r anthropicReader) tail(t *tally, d *window) {
	r.usage(t, tailUsage(d.tail(), 1))
	t.noteModel(modelIn(d, 1, modelMember))
	t.text = d.size
}

// anthropicGenerated returns the bytes of text a content block, or a
// stream's content_block_delta delta, generated: text (text_delta),
// thinking (thinking_delta) and a tool call's input (input_json_delta's
// partial_json; a whole block's input object). Not counted: a thinking
// block's signature (signature_delta), an opaque token that lets the API
// check the thinking when it is sent back, not generated text — the
// thinking is what is billed as output (a model that summarises its
// thinking bills the whole of it, which no answer shows: Anthropic's
// output-token headers still hold bulk on it) — nor a redacted_thinking
// block's encrypted data, nor citations (citations_delta), whose cited
// text is the caller's document. Names of tools are not counted either:
// no delta carries them.
func anthropicGenerated(block gjson.Result) int64 {
	n := strLen(block.Get("text")) + strLen(block.Get("thinking")) + strLen(block.Get("partial_json"))
	if input := block.Get("input"); input.IsObject() {
		n += int64(len(input.Raw))
	}
	return n
}

// event reads one event of a Messages stream.
func (r anthropicReader) event(t *tally, name, data []byte) {
	if len(name) == 0 && !bytes.Contains(data, anthropicMessagePrefix) && !bytes.Contains(data, anthropicBlockDeltaKey) {
		return
	}
	switch eventType(name, data) {
	case anthropicMessageStart:
		gjson.Get(view(data), "message").ForEach(func(key, value gjson.Result) bool {
			switch key.Str {
			case "usage":
				r.usage(t, value)
			case modelMember:
				t.noteModel(value)
			}
			return true
		})
	case anthropicMessageDelta:
		r.usage(t, gjson.Get(view(data), "usage"))
	case anthropicBlockDelta:
		t.text += anthropicGenerated(gjson.Get(view(data), "delta"))
	case anthropicMessageStop:
		t.terminal = true
	}
}

// longEvent reads a Messages event whose data outgrew its window: a
// usage from its end (message_start's is in its message: at depth 2) and
// message_start's model from its start, a content block delta's bytes as
// text.
func (r anthropicReader) longEvent(t *tally, name []byte, d *window) {
	switch eventType(name, d.start()) {
	case anthropicMessageStart:
		r.usage(t, tailUsage(d.tail(), 2))
		t.noteModel(modelIn(d, 2, "message."+modelMember))
	case anthropicMessageDelta:
		r.usage(t, tailUsage(d.tail(), 1))
	case anthropicBlockDelta:
		t.text += d.size
	case anthropicMessageStop:
		t.terminal = true
	}
}

// usage records a usage object of the Messages shape: each count
// present replaces the one recorded before, and so does the service tier.
// The parts recorded before are read back from the tally, its cache
// parts and its input less them: only usage records a Messages
// response's input, as the sum of the parts, with the parts as its cache
// parts.
func (anthropicReader) usage(t *tally, u gjson.Result) {
	if !u.IsObject() {
		return
	}
	in := anthropicInput{uncached: t.in - t.cache.read - t.cache.write, cacheWrite: t.cache.write, cacheRead: t.cache.read}
	haveIn := false
	u.ForEach(func(key, v gjson.Result) bool {
		if key.Str == tierMember {
			t.noteTier(v)
			return true
		}
		if v.Type != gjson.Number {
			return true
		}
		switch key.Str {
		case "input_tokens":
			in.uncached, haveIn = count(v), true
		case "cache_creation_input_tokens":
			in.cacheWrite, haveIn = count(v), true
		case "cache_read_input_tokens":
			in.cacheRead, haveIn = count(v), true
		case "output_tokens":
			t.setOut(count(v))
		}
		return true
	})
	if haveIn {
		t.setIn(in.uncached + in.cacheWrite + in.cacheRead)
		t.cache = cacheParts{read: in.cacheRead, write: in.cacheWrite}
	}
}
