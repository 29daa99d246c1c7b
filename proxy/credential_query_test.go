package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestKeyFromQuery: a Gemini path's ?key= moves to x-goog-api-key, every
// value of it, unescaped; the rest of the query stays as sent; other
// paths keep theirs.
func TestKeyFromQuery(t *testing.T) {
	for _, tt := range []struct {
		target, query string
		keys          []string
	}{
		{"/v1beta/models/m:streamGenerateContent?alt=sse&key=AIza1", "alt=sse", []string{"AIza1"}},
		{"/v1beta/models/m:generateContent?key=AIza1&key=AIza2", "", []string{"AIza1", "AIza2"}},
		{"/v1beta/models/m:generateContent?k%65y=a%2Bb&b=%20x", "b=%20x", []string{"a+b"}},
		{"/v1beta/openai/chat/completions?key=AIza1", "", []string{"AIza1"}},
		{"/v1beta/models/m:generateContent?%6Bey=AIza1&alt=sse", "alt=sse", []string{"AIza1"}},
		{"/v1beta/models/m:generateContent?keys=1&monkey=2", "keys=1&monkey=2", nil},
		{"/v1/chat/completions?key=AIza1", "key=AIza1", nil},
		{"/v1/models/m:generateContent?key=AIza1", "", []string{"AIza1"}},
	} {
		r := &http.Request{Header: http.Header{}}
		var err error
		if r.URL, err = url.ParseRequestURI(tt.target); err != nil {
			t.Fatal(err)
		}
		keyFromQuery(r)
		if got := r.Header.Values("X-Goog-Api-Key"); r.URL.RawQuery != tt.query || !slices.Equal(got, tt.keys) {
			t.Errorf("%s: query %q, x-goog-api-key %q; want %q, %q", tt.target, r.URL.RawQuery, got, tt.query, tt.keys)
		}
	}
}

// FuzzKeyFromQuery: whatever the query, on a Gemini path no parameter
// named key is left in it, each one it had is a header value, and the
// other parameters stay in order, as sent.
func FuzzKeyFromQuery(f *testing.F) {
	for _, q := range []string{"alt=sse&key=AIza", "key", "key=&key=%zz", "=&&key=a=b", "%6Bey=x", "a=1;key=2"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := &http.Request{Header: http.Header{}, URL: &url.URL{Path: "/v1beta/models/m:generateContent", RawQuery: query}}
		keyFromQuery(r)
		var kept, moved []string
		for part := range strings.SplitSeq(query, "&") {
			name, _, _ := strings.Cut(part, "=")
			if n, err := url.QueryUnescape(name); err == nil && n == queryKey {
				moved = append(moved, part)
			} else {
				kept = append(kept, part)
			}
		}
		if len(moved) == 0 {
			if r.URL.RawQuery != query || len(r.Header) != 0 {
				t.Fatalf("%q: changed to %q without a key", query, r.URL.RawQuery)
			}
			return
		}
		if r.URL.RawQuery != strings.Join(kept, "&") || len(r.Header.Values("X-Goog-Api-Key")) != len(moved) {
			t.Fatalf("%q: query %q, %d keys moved; want %q, %d", query, r.URL.RawQuery, len(r.Header.Values("X-Goog-Api-Key")), strings.Join(kept, "&"), len(moved))
		}
	})
}
