package proxy

import "net/http"

// credentialHeaders are the headers a caller may carry its key in.
var credentialHeaders = []string{"Authorization", "Api-Key", "X-Api-Key"}

// accountSelectors are the request headers that choose which of a key's
// organizations and projects a request is charged to and limited under:
// OpenAI's, for keys that reach several (user keys). Anthropic has none (a
// key belongs to one workspace; anthropic-organization-id is a response
// header), nor has Azure OpenAI (the resource is the URL).
var accountSelectors = []string{"Openai-Organization", "Openai-Project"}

// replaceCredential puts key, an account's API key the proxy holds, in
// header, the one its provider reads an API key from (endpoint.
// credential: Authorization: Bearer for OpenAI and OpenAI-compatible
// servers, api-key for Azure OpenAI, x-api-key for Anthropic), whatever
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
