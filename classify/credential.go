package classify

import (
	"net/http"
	"strings"
)

// credentialHeaders are the canonical names of the headers Credential reads,
// in the order it reads them: OpenAI style, Azure OpenAI, Anthropic,
// Google's Gemini API.
var credentialHeaders = [...]string{"Authorization", "Api-Key", "X-Api-Key", "X-Goog-Api-Key"}

// Credential returns where the caller put its API key and the key itself.
// It looks at "Authorization" (scheme "Bearer", matched case-insensitively),
// then "Api-Key", then "X-Api-Key", then "X-Goog-Api-Key"; the first that holds a non-empty key
// wins. Keys are trimmed of surrounding spaces and tabs. header is the
// canonical header name. ok is false when no header holds a key; an
// Authorization header with another scheme (such as Basic) is skipped.
//
// Credential does not retain h or the key and is safe for concurrent use.
func Credential(h http.Header) (header string, key string, ok bool) {
	if key, ok := BearerToken(h.Get(credentialHeaders[0])); ok {
		return credentialHeaders[0], key, true
	}
	for _, name := range credentialHeaders[1:] {
		if key := trim(h.Get(name)); key != "" {
			return name, key, true
		}
	}
	return "", "", false
}

// BearerToken extracts the token from an Authorization value
// "Bearer <token>": the scheme matched case-insensitively (RFC 7235), the
// token trimmed of spaces and tabs. ok is false for another scheme or an
// empty token.
func BearerToken(v string) (token string, ok bool) {
	const scheme = "bearer"
	v = trim(v)
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	if c := v[len(scheme)]; c != ' ' && c != '\t' {
		return "", false
	}
	key := trim(v[len(scheme):])
	return key, key != ""
}

// trim removes the optional whitespace (spaces and tabs) HTTP allows around
// a field value.
func trim(s string) string { return strings.Trim(s, " \t") }

// ConflictingCredentials reports whether h carries more than one distinct
// credential: two of Authorization, Api-Key, X-Api-Key and X-Goog-Api-Key (or two lines of
// one of them) holding different values. Credential reads one of them and
// the provider may authenticate with another, so such a request must not be
// classified by one key and forwarded with the other. An Authorization
// value counts by its bearer token, or whole when its scheme is not Bearer;
// empty values do not count.
func ConflictingCredentials(h http.Header) bool {
	var first string
	for _, name := range credentialHeaders {
		for _, v := range h.Values(name) {
			key := trim(v)
			if name == credentialHeaders[0] {
				if token, ok := BearerToken(v); ok {
					key = token
				}
			}
			switch {
			case key == "":
			case first == "":
				first = key
			case key != first:
				return true
			}
		}
	}
	return false
}
