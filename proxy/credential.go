package proxy

import (
	"net/http"

	"github.com/meterproxy/meterproxy/classify"
)

// credentialHeaders are the headers a caller may carry its key in.
var credentialHeaders = []string{"Authorization", "Api-Key", "X-Api-Key"}

// replaceCredential puts key where the caller put its own (Authorization:
// Bearer, api-key or x-api-key) and drops every other credential header.
// A caller without a key gets the provider's usual header: x-api-key on
// Anthropic's API, else Authorization.
func replaceCredential(h http.Header, anthropic bool, key string) {
	used, _, ok := classify.Credential(h)
	if !ok {
		used = "Authorization"
		if anthropic {
			used = "X-Api-Key"
		}
	}
	for _, name := range credentialHeaders {
		h.Del(name)
	}
	if used == "Authorization" {
		h.Set(used, "Bearer "+key)
		return
	}
	h.Set(used, key)
}
