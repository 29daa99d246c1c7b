package usage

import (
	"bytes"
	"encoding/json"

	"github.com/tidwall/gjson"
)

// OpenAI Chat Completions, legacy completions and embeddings report
//
//	usage: {prompt_tokens, completion_tokens, total_tokens, …}
//
// where prompt_tokens includes cached tokens (prompt_tokens_details; see
// cache.go) and completion_tokens includes reasoning tokens
// (completion_tokens_details.reasoning_tokens). Embeddings have no
// completion_tokens (embeddings.go). A chat completion, and each chunk of
// a stream, names its service tier (tier.go) and its model (model.go) at
// the top level.

var (
	doneData = []byte("[DONE]")
	usageKey = []byte(`"usage"`)
)

// chatReader reads Chat Completions responses, and legacy completions,
// whose bodies and chunks are alike.
type chatReader struct{}

// body reads a chat completion response (or a legacy completion): its
// usage, its service tier, its model, and what its choices generated for
// the estimate when it has none. The
// members are read in one pass; of a member repeated, the last counts, as
// when the usage of a long body is read from its end (lastMember).
func (chatReader) body(t *tally, body []byte) {
	gjson.Parse(view(body)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			chatNames.record(t, value)
		case tierMember:
			t.noteTier(value)
		case modelMember:
			t.noteModel(value)
		case "choices":
			value.ForEach(func(_, choice gjson.Result) bool {
				t.text += choiceGenerated(choice, "message")
				return true
			})
		}
		return true
	})
}

// tail reads a chat completion too large to keep: its usage, service
// tier and model, and all its bytes as generated text.
func (chatReader) tail(t *tally, d *window) {
	chatNames.record(t, tailUsage(d.tail(), 1))
	t.noteTier(tierIn(d, 1, tierMember))
	t.noteModel(modelIn(d, 1, modelMember))
	t.text = d.size
}

// event reads one event of a chat completions stream (or a legacy
// completions one, whose chunks are alike). The usage is on
// the chunk whose usage is not null: after the last choice with
// stream_options.include_usage, or on every chunk (cumulative) with vLLM's
// continuous_usage_stats. An empty choices array alone means nothing: Azure
// sends content-filter chunks so. Every chunk may name the service tier
// and the model.
// Nearly every chunk matters (its text counts for the estimate), so each
// is read in one pass.
func (r chatReader) event(t *tally, _, data []byte) {
	if bytes.Equal(bytes.TrimSpace(data), doneData) {
		t.terminal = true
		return
	}
	gjson.Parse(view(data)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			r.usageHighWater(t, value)
		case tierMember:
			t.noteTier(value)
		case modelMember:
			t.noteModel(value)
		case "choices":
			value.ForEach(func(_, choice gjson.Result) bool {
				t.text += choiceGenerated(choice, "delta")
				return true
			})
		}
		return true
	})
}

// longEvent reads a chunk whose data outgrew its window: all its bytes
// as generated text, its usage from its end, its service tier and model
// from its ends.
func (r chatReader) longEvent(t *tally, _ []byte, d *window) {
	t.text += d.size
	r.usageHighWater(t, tailUsage(d.tail(), 1))
	t.noteTier(tierIn(d, 1, tierMember))
	t.noteModel(modelIn(d, 1, modelMember))
}

// choiceGenerated returns the bytes of text one choice generated: its
// message (or, in a stream chunk, its delta), named by part, as
// chatGenerated counts it, and a legacy completion's text.
func choiceGenerated(choice gjson.Result, part string) int64 {
	var n int64
	choice.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case part:
			n += chatGenerated(v)
		case "text":
			n += strLen(v)
		}
		return true
	})
	return n
}

// chatGenerated returns the bytes of text a chat completion's message, or a
// stream chunk's delta, generated: its content, refusal and reasoning
// (reasoning_content as DeepSeek and vLLM send it, reasoning as OpenRouter
// and newer vLLM do), the names and arguments of its tool calls and of a
// legacy function_call, and an audio answer's transcript. The audio itself
// is sound in base64, not text, and is not counted. A content given as an
// array of parts counts each part's text.
func chatGenerated(msg gjson.Result) int64 {
	var n int64
	msg.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "content":
			n += strLen(v)
			if v.IsArray() {
				v.ForEach(func(_, part gjson.Result) bool { n += strLen(part.Get("text")); return true })
			}
		case "refusal", "reasoning_content", "reasoning":
			n += strLen(v)
		case "tool_calls":
			v.ForEach(func(_, call gjson.Result) bool { n += functionLen(call.Get("function")); return true })
		case "function_call":
			n += functionLen(v)
		case "audio":
			n += strLen(v.Get("transcript"))
		}
		return true
	})
	return n
}

// functionLen returns the bytes of a function call's name and arguments.
func functionLen(fn gjson.Result) int64 {
	return strLen(fn.Get("name")) + strLen(fn.Get("arguments"))
}

// strLen returns the length of v's text when v is a JSON string, else 0.
func strLen(v gjson.Result) int64 {
	if v.Type != gjson.String {
		return 0
	}
	return int64(len(v.Str))
}

// usageNames are the members an OpenAI usage object names its parts by:
// the chat completions shape's, or the Responses shape's.
type usageNames struct{ in, out, inDetails, outDetails string }

var (
	chatNames      = usageNames{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details"}
	responsesNames = usageNames{"input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details"}
)

// record records a usage object whose members are named as names says,
// its cache parts and reasoning replacing those recorded before, in one
// pass over its members (of a member repeated, the last counts).
func (names *usageNames) record(t *tally, u gjson.Result) {
	if !u.IsObject() {
		return
	}
	var cache cacheParts
	var reasoning int64
	u.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case names.in:
			if v.Type == gjson.Number {
				t.setIn(count(v))
			}
		case names.out:
			if v.Type == gjson.Number {
				t.setOut(count(v))
			}
		case names.inDetails:
			cache = openAICache(v)
		case names.outDetails:
			reasoning = reasoningTokens(v)
		}
		return true
	})
	t.cache, t.reasoning = cache, reasoning
}

// usageHighWater records a streamed usage object, keeping the highest
// count of each kind seen, cache parts and reasoning included: with continuous usage
// every chunk carries the running total, so the latest is the largest and
// none may be added up.
func (chatReader) usageHighWater(t *tally, u gjson.Result) {
	in, out, cache, reasoning, haveIn, haveOut := t.in, t.out, t.cache, t.reasoning, t.haveIn, t.haveOut
	chatNames.record(t, u)
	if haveIn {
		t.in = max(t.in, in)
	}
	if haveOut {
		t.out = max(t.out, out)
	}
	t.cache = t.cache.highWater(cache)
	t.reasoning = max(t.reasoning, reasoning)
}

// reasoningTokens is an OpenAI output details object's reasoning_tokens
// (completion_tokens_details, output_tokens_details): the part of the
// output spent reasoning; 0 when it has none or it is not a number.
func reasoningTokens(details gjson.Result) int64 {
	if v := details.Get("reasoning_tokens"); details.IsObject() && v.Type == gjson.Number {
		return count(v)
	}
	return 0
}

// isUsageChunk reports whether an event's data is the chunk that
// stream_options.include_usage adds: a chat completion chunk with an empty
// choices array and a usage object.
func isUsageChunk(data []byte) bool {
	if !bytes.Contains(data, usageKey) {
		return false
	}
	chunk := view(data)
	if !isEmptyArray(gjson.Get(chunk, "choices")) || !gjson.Get(chunk, "usage").IsObject() {
		return false
	}
	if obj := gjson.Get(chunk, "object"); obj.Exists() && obj.Str != "chat.completion.chunk" {
		return false
	}
	return json.Valid(data) && gjson.Parse(chunk).IsObject() // iterative and depth-bounded, unlike gjson.Valid
}

// isEmptyArray reports whether r is a JSON array without elements.
func isEmptyArray(r gjson.Result) bool {
	if !r.IsArray() {
		return false
	}
	empty := true
	r.ForEach(func(_, _ gjson.Result) bool {
		empty = false
		return false
	})
	return empty
}
