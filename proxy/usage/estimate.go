package usage

import "github.com/tidwall/gjson"

// bytesPerToken is the estimate's exchange rate: about four bytes of
// English text or JSON per token for current tokenizers. It errs high for
// code and non-Latin scripts, which is the safe side for a quota.
const bytesPerToken = 4

// ceilQuarter returns n / bytesPerToken rounded up.
func ceilQuarter(n int64) int64 { return (n + bytesPerToken - 1) / bytesPerToken }

// EstimateInput estimates a request's input tokens before it goes: body
// bytes / 4, rounded up, and nothing else (no max_tokens, no image or tool
// cost).
func EstimateInput(body []byte) int64 { return ceilQuarter(int64(len(body))) }

// maxOutputKeys are the request fields that cap generated tokens: Chat
// Completions (max_tokens, deprecated for max_completion_tokens), the
// Responses API (max_output_tokens) and Anthropic Messages (max_tokens).
var maxOutputKeys = [...]string{"max_tokens", "max_output_tokens", "max_completion_tokens"}

// MaxOutput reads max_tokens / max_output_tokens / max_completion_tokens
// from a request body's top level and returns the largest one present, or 0
// if none is a positive number (or the body is not a JSON object).
func MaxOutput(body []byte) int64 {
	doc := gjson.Parse(view(body))
	if !doc.IsObject() {
		return 0
	}
	var most int64
	for _, key := range maxOutputKeys {
		if v := doc.Get(key); v.Type == gjson.Number {
			most = max(most, count(v))
		}
	}
	return most
}

// BestOf reads best_of from a request body's top level (legacy
// completions: the server generates that many and returns the best), or 1
// when it is absent, not a number above 1, or the body is not a JSON
// object.
func BestOf(body []byte) int64 {
	doc := gjson.Parse(view(body))
	if !doc.IsObject() {
		return 1
	}
	if v := doc.Get("best_of"); v.Type == gjson.Number {
		return max(1, count(v))
	}
	return 1
}

// maxModel bounds the model name Model returns: a longer one is no model
// any pool names (quota bounds its patterns shorter), and matching it
// would cost time for nothing.
const maxModel = 512

// Model reads the model field from a request body's top level (OpenAI
// chat, completions, embeddings, Responses; Anthropic Messages), or ""
// when it is absent, not a string, longer than 512 bytes, or the body is
// not a JSON object. Like MaxOutput it reads only the top level: a value
// nested however deep is skipped, not parsed.
func Model(body []byte) string {
	doc := gjson.Parse(view(body))
	if !doc.IsObject() {
		return ""
	}
	if v := doc.Get("model"); v.Type == gjson.String && len(v.Str) <= maxModel {
		return v.Str
	}
	return ""
}
