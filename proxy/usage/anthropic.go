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
// replaces the one before, none is added.

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

// anthropicBody reads a Messages response.
func (m *Meter) anthropicBody(body []byte) {
	m.anthropicUsage(gjson.Get(view(body), "usage"))
}

// anthropicEvent reads one event of a Messages stream.
func (m *Meter) anthropicEvent(name, data []byte) {
	if len(name) == 0 && !bytes.Contains(data, anthropicMessagePrefix) && !bytes.Contains(data, anthropicBlockDeltaKey) {
		return
	}
	switch eventType(name, data) {
	case anthropicMessageStart:
		m.anthropicUsage(gjson.Get(view(data), "message.usage"))
	case anthropicMessageDelta:
		m.anthropicUsage(gjson.Get(view(data), "usage"))
	case anthropicBlockDelta:
		m.text += int64(len(gjson.Get(view(data), "delta.text").Str))
	case anthropicMessageStop:
		m.terminal = true
	}
}

// anthropicUsage records a usage object of the Messages shape: each count
// present replaces the one recorded before.
func (m *Meter) anthropicUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	in, haveIn := m.anthropic, false
	u.ForEach(func(key, v gjson.Result) bool {
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
			m.setOut(count(v))
		}
		return true
	})
	if haveIn {
		m.anthropic = in
		m.setIn(in.uncached + in.cacheWrite + in.cacheRead)
	}
}
