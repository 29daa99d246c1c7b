package usage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestLastMember(t *testing.T) {
	tests := []struct {
		name  string
		tail  string
		key   string
		depth int
		want  string // "" when not found
	}{
		{"last member", `{"a":1,"usage":{"x":2}}`, "usage", 1, `{"x":2}`},
		{"member before others", `{"usage":{"x":2} , "b":[1,{"usage":3}],"c":"d"}`, "usage", 1, `{"x":2}`},
		{"whitespace", "{\"usage\" :\n {\"x\":2}\n}\n", "usage", 1, `{"x":2}`},
		{"the last of two", `{"usage":1,"usage":2}`, "usage", 1, "2"},
		{"in a string only", `{"a":"\"usage\":{\"x\":1}"}`, "usage", 1, ""},
		{"escaped key", `{"x\"usage":{"x":1}}`, "usage", 1, ""},
		{"a string value", `{"a":"usage"}`, "usage", 1, ""},
		{"nested only", `{"a":{"usage":1}}`, "usage", 1, ""},
		{"depth 2", `{"type":"response.completed","response":{"output":[],"usage":{"x":3},"metadata":{"usage":"m"}}}`, "usage", 2, `{"x":3}`},
		{"tail starts mid-document", `, "pad"]}],"usage":{"x":4}}`, "usage", 1, `{"x":4}`},
		{"tail starts mid-string", `ad\" more","usage":{"x":5}}`, "usage", 1, `{"x":5}`},
		{"tail starts inside the member", `sage":{"x":5}}`, "usage", 1, ""},
		{"even backslashes end a string", `{"a":"x\\\\","usage":6}`, "usage", 1, "6"},
		{"backslashes reach the start", `\\"usage":7}`, "usage", 1, ""},
		{"not an object", `[1,2]`, "usage", 1, ""},
		{"truncated", `{"usage":{"x":1}`, "usage", 1, ""},
		{"empty", ``, "usage", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := lastMember([]byte(tt.tail), tt.key, tt.depth)
			if string(got) != tt.want || ok != (tt.want != "") {
				t.Errorf("lastMember(%s) = %q, %v; want %q", tt.tail, got, ok, tt.want)
			}
		})
	}
}

// FuzzLastMember: read from any suffix of a valid JSON object without
// duplicate keys, lastMember finds the top-level member or nothing —
// never another value — and finds it in the whole text unless its key is
// written with escapes (it compares keys as written: providers write
// "usage" plainly).
func FuzzLastMember(f *testing.F) {
	for _, seed := range []string{chatJSON, responsesJSON, anthropicJSON, embeddingsJSON, openAIErrorJSON,
		`{"a":"\"usage\":{}","usage":{"x":1},"m":{"usage":2},"k\"usage":3}`, `{"usage":"\\\\"}`} {
		f.Add([]byte(seed), uint16(len(seed)/2)) //nolint:gosec // G115: the seeds are under 64 KiB
	}
	f.Fuzz(func(t *testing.T, doc []byte, cut uint16) {
		if !json.Valid(doc) || !gjson.ParseBytes(doc).IsObject() || hasDuplicateKeys(doc) {
			return
		}
		want := gjson.GetBytes(doc, "usage")
		whole, ok := lastMember(doc, "usage", 1)
		if ok && string(whole) != strings.TrimSpace(want.Raw) || !ok && want.Exists() && !bytes.Contains(doc, []byte(`\u`)) {
			t.Fatalf("whole: %q, %v; want %q", whole, ok, want.Raw)
		}
		tail := doc[int(cut)%(len(doc)+1):]
		if got, ok := lastMember(tail, "usage", 1); ok && string(got) != strings.TrimSpace(want.Raw) {
			t.Fatalf("from %q: %q; want %q", tail, got, want.Raw)
		}
	})
}
