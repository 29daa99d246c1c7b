package proxy

import (
	"net/http"
	"net/url"
	"strings"
)

// credentialHeaders are the headers a caller may carry its key in.
var credentialHeaders = []string{"Authorization", "Api-Key", "X-Api-Key", "X-Goog-Api-Key"}

// accountSelectors are the request headers that choose which of a key's
// organizations and projects a request is charged to and limited under:
// OpenAI's, for keys that reach several (user keys). Anthropic has none (a
// key belongs to one workspace; anthropic-organization-id is a response
// header), nor has Azure OpenAI (the resource is the URL).
var accountSelectors = []string{"Openai-Organization", "Openai-Project"}

// replaceCredential puts key, an account's API key the proxy holds, in
// header, the one its provider reads an API key from (endpoint.
// credential: Authorization: Bearer for OpenAI and OpenAI-compatible
// servers, api-key for Azure OpenAI, x-api-key for Anthropic,
// x-goog-api-key for Gemini's native API; a Gemini caller's ?key= is a
// header by then, keyFromQuery), whatever
// header the caller put its own in — Claude Code's ANTHROPIC_AUTH_TOKEN
// arrives as Authorization, where Anthropic reads OAuth tokens, not
// keys — and drops every other credential header, and the caller's
// account selectors: they would choose among the organizations and
// projects of key, not of the caller's own.
func replaceCredential(h http.Header, header, key string) {
	for _, name := range credentialHeaders {
		h.Del(name)
	}
	for _, name := range accountSelectors {
		h.Del(name)
	}
	if header == "Authorization" {
		h.Set(header, "Bearer "+key)
		return
	}
	h.Set(header, key)
}

// queryKey is the query parameter the Gemini API also reads a key from.
const queryKey = "key"

// keyFromQuery moves a Gemini caller's ?key= into the X-Goog-Api-Key
// header of r, which the Gemini API reads a key from too, before anything
// reads r: from then on the key is classified as any other credential
// (classify.Credential), a different key in the header conflicts with it
// (classify.ConflictingCredentials), and it never stands in the URL that
// goes upstream, into a log or into a trace. Only paths of Gemini's
// families are read (elsewhere "key" may mean something else); every
// value of it is moved, and r's URL keeps the rest of its query as sent.
func keyFromQuery(r *http.Request) {
	if r.URL.RawQuery == "" {
		return
	}
	if f := familyOf(r.URL.Path); f != familyGemini && f != familyGeminiOpenAI { // a name spelt escaped ("%6Bey") is the key too
		return
	}
	var kept []string
	moved := false
	for part := range strings.SplitSeq(r.URL.RawQuery, "&") {
		name, value, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err != nil || n != queryKey {
			kept = append(kept, part)
			continue
		}
		if v, err := url.QueryUnescape(value); err == nil {
			r.Header.Add("X-Goog-Api-Key", v)
		} else {
			r.Header.Add("X-Goog-Api-Key", value)
		}
		moved = true
	}
	if moved {
		r.URL.RawQuery = strings.Join(kept, "&")
	}
}
