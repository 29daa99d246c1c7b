package proxy

import (
	"net/http"

	"github.com/meterproxy/meterproxy/classify"
)

// credentialHeaders are the headers a caller may carry its key in.
var credentialHeaders = []string{"Authorization", "Api-Key", "X-Api-Key"}

// accountSelectors are the request headers that choose which of a key's
// organizations and projects a request is charged to and limited under:
// OpenAI's, for keys that reach several (user keys). Anthropic has none (a
// key belongs to one workspace; anthropic-organization-id is a response
// header), nor has Azure OpenAI (the resource is the URL).
var accountSelectors = []string{"Openai-Organization", "Openai-Project"}

// replaceCredential puts key where the caller put its own (Authorization:
// Bearer, api-key or x-api-key) and drops every other credential header,
// and the caller's account selectors: they would choose among the
// organizations and projects of key, not of the caller's own. A caller
// without a key gets it in fallback, the header its API reads a key from
// (endpoint.credential).
func replaceCredential(h http.Header, fallback, key string) {
	used, _, ok := classify.Credential(h)
	if !ok {
		used = fallback
	}
	for _, name := range credentialHeaders {
		h.Del(name)
	}
	for _, name := range accountSelectors {
		h.Del(name)
	}
	if used == "Authorization" {
		h.Set(used, "Bearer "+key)
		return
	}
	h.Set(used, key)
}
