package usage

import (
	"encoding/json"
	"testing"
)

func TestBackground(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`{"model":"m","background":true}`, true},
		{`{"model":"m","background":false}`, false},
		{`{"model":"m"}`, false},
		{`{"background":"true"}`, false},
		{`{"background":1}`, false},
		{`{"metadata":{"background":true}}`, false},       // nested: not the request's
		{`{"background":false,"background":true}`, true},  // the provider reads the last
		{`{"background":true,"background":false}`, false}, // the provider reads the last
		{`{"backgr\u006fund":true}`, true},                // escaped as the provider unescapes
		{`[{"background":true}]`, false},
		{`not json`, false},
		{``, false},
	} {
		if got := Background([]byte(tt.body)); got != tt.want {
			t.Errorf("Background(%s) = %v, want %v", tt.body, got, tt.want)
		}
	}
}

// FuzzBackground: Background never panics, and on any body encoding/json
// reads as an object it agrees with it (a map keeps the last of duplicate
// keys, as the providers do).
func FuzzBackground(f *testing.F) {
	for _, s := range []string{`{"background":true}`, `{"background":false,"background":true}`,
		`{"a":{"background":true},"background":null}`, `{"backgr\u006fund":true}`, `[true]`, `{"background":tru`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := Background(body)
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || m == nil {
			return
		}
		var v any
		want := m["background"] != nil && json.Unmarshal(m["background"], &v) == nil && v == true
		if got != want {
			t.Fatalf("Background(%q) = %v, encoding/json reads %v", body, got, want)
		}
	})
}
