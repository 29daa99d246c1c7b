package usage

import "github.com/tidwall/gjson"

// OpenAI embeddings report the usage openai.go describes without
// completion_tokens: input tokens only, an embedding generates no text.
// The response names its model at the top level (model.go); it is never
// streamed.

// embeddingsReader reads embeddings responses.
type embeddingsReader struct{}

// body reads an embeddings response: input tokens only, and its model,
// in one pass.
func (r embeddingsReader) body(t *tally, body []byte) {
	gjson.Parse(view(body)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "usage":
			r.usage(t, value)
		case modelMember:
			t.noteModel(value)
		}
		return true
	})
}

// tail reads an embeddings response too large to keep (a long list of
// vectors): its usage and model; none of its bytes is generated text.
func (r embeddingsReader) tail(t *tally, d *window) {
	r.usage(t, tailUsage(d.tail(), 1))
	t.noteModel(modelIn(d, 1, modelMember))
}

// event and longEvent read nothing: embeddings are never streamed.
func (embeddingsReader) event(*tally, []byte, []byte)      {}
func (embeddingsReader) longEvent(*tally, []byte, *window) {}

// usage records an embeddings usage object: input tokens only.
func (embeddingsReader) usage(t *tally, u gjson.Result) {
	if in := u.Get("prompt_tokens"); u.IsObject() && in.Type == gjson.Number {
		t.setIn(count(in))
	}
}
