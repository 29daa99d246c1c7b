package usage

import (
	"encoding/json"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// InjectServiceTier asks OpenAI or Azure OpenAI to serve a Chat
// Completions or Responses request at tier ("flex"). For a request body
// that is a JSON object without a top-level service_tier — any value the
// caller set, null included, wins — it returns the body with
// "service_tier" set to tier at the end of the object, and injected=true.
// Otherwise, invalid JSON included, it returns body unchanged and false.
// The rest of the body keeps its order and formatting. body is never
// modified; a changed body is a new slice. tier is a plain identifier
// such as "flex" (it is written as a JSON string as given).
func InjectServiceTier(body []byte, tier string) (out []byte, injected bool) {
	doc := gjson.Parse(view(body))
	// encoding/json's validator, not gjson's: see InjectStreamUsage.
	if !doc.IsObject() || doc.Get(serviceTierKey).Exists() || !json.Valid(body) {
		return body, false
	}
	out, err := sjson.SetBytes(body, serviceTierKey, tier)
	// As in InjectStreamUsage: check the edit says what the provider
	// must read, and leave the body alone if not.
	if err != nil || !json.Valid(out) || gjson.GetBytes(out, serviceTierKey).String() != tier {
		return body, false
	}
	return out, true
}

// serviceTierKey is the request field OpenAI's Chat Completions and
// Responses APIs (and Azure OpenAI's) read the service tier from.
const serviceTierKey = "service_tier"
