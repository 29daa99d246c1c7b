package usage

import (
	"encoding/json"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// includeUsage is the stream_options that asks for a usage chunk.
const includeUsage = `{"include_usage":true}`

// InjectStreamUsage asks an OpenAI-compatible server to end a chat
// completions stream with its usage. For a request body with "stream": true
// and without stream_options.include_usage true, it returns the body with
// "stream_options":{"include_usage":true} set, keeping any other
// stream_options fields, and injected=true. Otherwise, invalid JSON
// included, it returns body unchanged and false.
//
// The rest of the body keeps its order and formatting: only the
// include_usage value is replaced or added (stream_options is added at the
// end of the object when absent, or replaced when it is not an object).
// body is never modified; a changed body is a new slice.
func InjectStreamUsage(body []byte) (out []byte, injected bool) {
	doc := gjson.Parse(view(body))
	// encoding/json's validator, not gjson's: it is iterative and stops at
	// 10,000 levels of nesting, where gjson.Valid recurses once per level
	// and a body of '[' ends the process with a stack overflow.
	if !doc.IsObject() || doc.Get("stream").Type != gjson.True || !json.Valid(body) {
		return body, false
	}
	opts := doc.Get("stream_options")
	var err error
	switch {
	case opts.Get("include_usage").Type == gjson.True:
		return body, false
	case opts.IsObject():
		out, err = sjson.SetRawBytes(body, "stream_options.include_usage", []byte("true"))
	default:
		out, err = sjson.SetRawBytes(body, "stream_options", []byte(includeUsage))
	}
	// sjson edits the bytes it finds with gjson's reading; check the result
	// says what the server must read, and leave the body alone if not.
	if err != nil || !json.Valid(out) || gjson.GetBytes(out, "stream_options.include_usage").Type != gjson.True {
		return body, false
	}
	return out, true
}
