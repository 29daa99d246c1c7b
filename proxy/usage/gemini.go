package usage

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Google's Gemini API (generateContent, streamGenerateContent) reports
//
//	usageMetadata: {promptTokenCount, cachedContentTokenCount, candidatesTokenCount,
//	                thoughtsTokenCount, toolUsePromptTokenCount, totalTokenCount, …}
//
// where promptTokenCount counts the whole prompt, cached content included
// (cachedContentTokenCount is the part of it read from the cache), and
// toolUsePromptTokenCount the prompt of tool use besides: both are input.
// candidatesTokenCount counts the answer without the thinking, which
// thoughtsTokenCount reports apart and Google bills as output: the output
// is their sum, thoughts its reasoning part. totalTokenCount is their
// sum, and is not read. Each response names its model in modelVersion.
//
// streamGenerateContent?alt=sse sends each GenerateContentResponse as one
// event's data; each carries usageMetadata, cumulative, the last one
// whole (each count present replaces the one before). Without alt=sse the
// stream is one JSON array of those objects (a JSON body), read alike,
// element by element. The chunk that ends the stream names a
// finishReason on its candidate (or a promptFeedback.blockReason when
// the prompt was blocked, which generates nothing): that is the terminal
// event. embedContent and
// batchEmbedContents are read by the same reader without their output:
// an embedding generates no text, and when their answer reports no usage
// the input estimate stands.

const (
	geminiUsageMember = "usageMetadata"
	geminiModelMember = "modelVersion"
)

var (
	geminiFinishKey = []byte(`"finishReason"`)
	geminiBlockKey  = []byte(`"blockReason"`)
)

// geminiReader reads Gemini API responses; embed says they are
// embeddings, whose bytes are no generated text.
type geminiReader struct{ embed bool }

// body reads a generateContent answer, or a stream sent as one JSON array
// of them, element by element.
func (r geminiReader) body(t *tally, body []byte) {
	doc := gjson.Parse(view(body))
	if !doc.IsArray() {
		r.response(t, doc)
		return
	}
	doc.ForEach(func(_, v gjson.Result) bool {
		r.response(t, v)
		return true
	})
}

// response reads one GenerateContentResponse in one pass: its usage, its
// model, the text its candidates generated, and whether it ends a stream.
func (r geminiReader) response(t *tally, doc gjson.Result) {
	doc.ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case geminiUsageMember:
			r.usage(t, value)
		case geminiModelMember:
			t.noteModel(value)
		case "candidates":
			value.ForEach(func(_, c gjson.Result) bool {
				if !r.embed {
					t.text += geminiGenerated(c.Get("content"))
				}
				t.terminal = t.terminal || c.Get("finishReason").Type == gjson.String
				return true
			})
		case "promptFeedback":
			if value.Get("blockReason").Type == gjson.String {
				t.terminal = true
				if !t.haveOut {
					t.setOut(0) // a blocked prompt generates nothing
				}
			}
		}
		return true
	})
}

// geminiGenerated returns the bytes of text a candidate's content
// generated: each part's text (a thought's too) and a function call's
// arguments.
func geminiGenerated(content gjson.Result) int64 {
	var n int64
	content.Get("parts").ForEach(func(_, part gjson.Result) bool {
		n += strLen(part.Get("text"))
		if args := part.Get("functionCall.args"); args.IsObject() {
			n += int64(len(args.Raw))
		}
		return true
	})
	return n
}

// tail reads an answer too large to keep: the usage and model of its
// last response (the last element of a stream's array, whose usage is
// the whole), and, unless it is an embedding, all its bytes as generated
// text.
func (r geminiReader) tail(t *tally, d *window) {
	last := geminiLast(d.tail())
	if v, ok := lastMember(last, geminiUsageMember, 1); ok {
		r.usage(t, gjson.Parse(view(v)))
	}
	model := gjson.Get(view(d.start()), geminiModelMember)
	if model.Type != gjson.String {
		model = gjson.Get(view(d.start()), "0."+geminiModelMember)
	}
	if v, ok := lastMember(last, geminiModelMember, 1); ok && model.Type != gjson.String {
		model = gjson.Parse(view(v))
	}
	t.noteModel(model)
	if !r.embed {
		t.text = d.size
	}
}

// geminiLast is the JSON text tail ends with, less the close of the array
// a stream is sent as: its last element then ends it.
func geminiLast(tail []byte) []byte {
	tail = bytes.TrimRight(tail, " \t\r\n")
	if len(tail) > 0 && tail[len(tail)-1] == ']' {
		tail = tail[:len(tail)-1]
	}
	return tail
}

// event reads one event of an alt=sse stream: one response.
func (r geminiReader) event(t *tally, _, data []byte) {
	r.response(t, gjson.Parse(view(data)))
}

// longEvent reads an event whose data outgrew its window: all its bytes
// as generated text, its usage from its end, its model from its start,
// and whether it names a finishReason (or a blockReason) in what was
// kept of it.
func (r geminiReader) longEvent(t *tally, _ []byte, d *window) {
	t.text += d.size
	tail := d.tail()
	if v, ok := lastMember(tail, geminiUsageMember, 1); ok {
		r.usage(t, gjson.Parse(view(v)))
	}
	if v, ok := lastMember(tail, geminiModelMember, 1); ok {
		t.noteModel(gjson.Parse(view(v)))
	}
	t.terminal = t.terminal || bytes.Contains(tail, geminiFinishKey) || bytes.Contains(tail, geminiBlockKey)
}

// usage records a usageMetadata object: each count present replaces the
// one recorded before, and the input and output are made of their parts
// as recorded so far. An embedding's has no output.
func (r geminiReader) usage(t *tally, u gjson.Result) {
	if !u.IsObject() {
		return
	}
	var in, cached, toolUse, cand, thoughts gjson.Result
	u.ForEach(func(key, v gjson.Result) bool {
		if v.Type != gjson.Number {
			return true
		}
		switch key.Str {
		case "promptTokenCount":
			in = v
		case "cachedContentTokenCount":
			cached = v
		case "toolUsePromptTokenCount":
			toolUse = v
		case "candidatesTokenCount":
			cand = v
		case "thoughtsTokenCount":
			thoughts = v
		}
		return true
	})
	if in.Exists() || toolUse.Exists() {
		t.gemini.prompt, t.gemini.toolUse = keep(in, t.gemini.prompt), keep(toolUse, t.gemini.toolUse)
		t.setIn(t.gemini.prompt + t.gemini.toolUse)
	}
	if cached.Exists() {
		t.cache.read = count(cached)
	}
	if !r.embed && (cand.Exists() || thoughts.Exists()) {
		t.gemini.candidates, t.reasoning = keep(cand, t.gemini.candidates), keep(thoughts, t.reasoning)
		t.setOut(t.gemini.candidates + t.reasoning)
	}
}

// keep is the count v reports, or was when v is absent.
func keep(v gjson.Result, was int64) int64 {
	if !v.Exists() {
		return was
	}
	return count(v)
}

// geminiParts are the parts of a Gemini input and output recorded so far,
// which a later usageMetadata may report one at a time.
type geminiParts struct {
	prompt, toolUse, candidates int64
}
