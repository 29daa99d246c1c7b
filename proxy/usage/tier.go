package usage

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A response names the service tier that served it: Chat Completions in
// its top-level service_tier (the JSON body and every stream chunk),
// the Responses API in the service_tier of its response object (the body,
// or the response a stream's response.created, in_progress and terminal
// events repeat), Anthropic Messages in usage.service_tier (the body,
// message_start's message and message_delta). Prices depend on it, so it
// is read from the response, not the request, which may ask for "auto".

// maxTier is the longest service tier kept. The tiers named today
// ("default", "flex", "priority", "scale", "standard", "batch", "auto")
// are at most 8 bytes; 32 leaves room for names to come while a tier that
// will be looked up in a closed set of labels stays short.
const maxTier = 32

// tierMember is the name of the member that holds a service tier.
const tierMember = "service_tier"

// validTier reports whether s may be kept as a service tier: 1 to maxTier
// bytes of lower-case ASCII letters, digits, '_' and '-'.
func validTier(s string) bool {
	if s == "" || len(s) > maxTier {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// servedTier is the service tier kept once v names one, kept the tier
// kept before: a missing or null v names none and leaves kept; a valid
// string replaces it; anything else (too long, a character outside the
// set, not a string) names a tier the meter will not report, and leaves
// none (""). The tier is copied (v may view a reused buffer; see ownTier)
// only when it differs from kept, so a stream naming the same tier on
// every chunk allocates at most once.
func servedTier(v gjson.Result, kept string) string {
	switch {
	case v.Type == gjson.Null: // also what gjson returns for a missing member
		return kept
	case v.Type == gjson.String && validTier(v.Str):
		if v.Str != kept {
			return ownTier(v.Str)
		}
		return kept
	default:
		return ""
	}
}

// ownTier returns s as a string of its own: the constant of a tier named
// today, which costs no allocation, else a copy.
func ownTier(s string) string {
	switch s {
	case "default":
		return "default"
	case "flex":
		return "flex"
	case "priority":
		return "priority"
	case "scale":
		return "scale"
	case "standard":
		return "standard"
	case "batch":
		return "batch"
	case "auto":
		return "auto"
	}
	return strings.Clone(s)
}

// tierIn returns the service tier of the JSON text that a window holds
// only in part (it outgrew the window): the last service_tier member at
// depth in its tail (see lastMember), else the one at path in its first
// bytes, where chunks that put it before their content have it. A value
// cut off at the end of the first bytes is not a string and reads as
// missing.
func tierIn(d *window, depth int, path string) gjson.Result {
	if v, ok := lastMember(d.tail(), tierMember, depth); ok {
		return gjson.Parse(view(v))
	}
	return gjson.Get(view(d.start()), path)
}
