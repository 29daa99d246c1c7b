package usage

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A response names the model that served it, which may not be the one
// asked for (an alias such as "gpt-4o" is answered as a dated snapshot,
// a deployment or router answers with the model behind it): Chat
// Completions, legacy completions and embeddings in their top-level model
// (the JSON body and every stream chunk), the Responses API in the model
// of its response object (the body, or the response a stream's
// response.created, in_progress and terminal events repeat), Anthropic
// Messages in its top-level model (the body, or message_start's message).
// It is read in the pass that reads the usage and the service tier, for
// the access log and traces; nothing is priced by it.

// maxServedModel is the most bytes of a model's name kept: the longest names
// in use (a Fireworks or Bedrock path, a fine-tune's "ft:" name) are
// under 100 bytes.
const maxServedModel = 128

// modelMember is the name of the member that holds a model.
const modelMember = "model"

// modelByte reports whether c may stand in a kept model name: ASCII
// letters, digits and - _ . : / @ +, enough for every provider's names
// ("gpt-4.1-2025-04-14", "claude-sonnet-4-5-20250929",
// "meta-llama/Llama-3.1-8B-Instruct", "ft:gpt-4o:org::id",
// "anthropic.claude-3-5-sonnet-20240620-v1:0").
func modelByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '@' || c == '+'
}

// ServedModel is the model v names, as a served model is kept: its first
// maxServedModel bytes, each byte outside modelByte replaced by '_'; kept
// when v names none — it is not a string, or is the empty string (Azure's
// prompt-filter chunk sends "model":"") — or names kept itself. The name
// is copied (v may view a reused buffer) only when it differs from kept,
// so a stream naming the same model on every chunk allocates once. A
// Realtime session's session.model is read by it too (proxy).
func ServedModel(v gjson.Result, kept string) string {
	if v.Type != gjson.String || v.Str == "" {
		return kept
	}
	s := v.Str[:min(len(v.Str), maxServedModel)]
	clean := true
	for i := range len(s) {
		if !modelByte(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		if s != kept {
			return strings.Clone(s)
		}
		return kept
	}
	var b [maxServedModel]byte
	for i := range len(s) {
		if b[i] = s[i]; !modelByte(s[i]) {
			b[i] = '_'
		}
	}
	if string(b[:len(s)]) != kept { // compared without a copy
		return string(b[:len(s)])
	}
	return kept
}

// modelIn returns the model named in the JSON text that a window holds
// only in part (it outgrew the window): at path in its first bytes, where
// providers name it (before the content), else the last model member at
// depth in its tail (see lastMember). A value cut off at the end of the
// first bytes is not a string and reads as missing.
func modelIn(d *window, depth int, path string) gjson.Result {
	if v := gjson.Get(view(d.start()), path); v.Type == gjson.String {
		return v
	}
	if v, ok := lastMember(d.tail(), modelMember, depth); ok {
		return gjson.Parse(view(v))
	}
	return gjson.Result{}
}
