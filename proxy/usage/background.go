package usage

import "github.com/tidwall/gjson"

// Background reports whether a Responses API request body asks for
// background: true at its top level. The provider then answers at once
// (status queued, no usage) and generates after the answer, so the answer
// says nothing of what the request costs. Keys are read as the provider
// reads a JSON object, the last of duplicates winning; only the top level
// is read, nested values are skipped, not parsed. False for any other
// value, or a body that is not a JSON object.
func Background(body []byte) bool {
	doc := gjson.Parse(view(body))
	if !doc.IsObject() {
		return false
	}
	background := false
	doc.ForEach(func(key, value gjson.Result) bool {
		if key.Str == "background" {
			background = value.Type == gjson.True
		}
		return true
	})
	return background
}
