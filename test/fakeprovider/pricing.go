package fakeprovider

import (
	"fmt"
	"net/http"
	"strconv"
)

// What a reply's usage says pricing needs: the input tokens read from the
// prompt cache, and the service tier that served the request. Real
// providers decide both; the fake is told. See the package documentation.

// HeaderCachedTokens makes a reply's usage report this many of its input
// tokens (at most all of them) as read from the prompt cache: OpenAI
// shapes in prompt_tokens_details.cached_tokens (Chat Completions) or
// input_tokens_details.cached_tokens (Responses), within the input count;
// Anthropic as cache_read_input_tokens, its input_tokens reduced by as
// many (Anthropic's input_tokens counts only the uncached part).
//
//nolint:gosec // G101: a header name that contains "Tokens", not a credential.
const HeaderCachedTokens = "X-Fake-Cached-Tokens"

// Service tiers the fake serves at.
const (
	// tierFlex and tierPriority are the OpenAI tiers served as asked for.
	tierFlex     = "flex"
	tierPriority = "priority"
	// tierDefault is the OpenAI tier of every other request: one asking
	// for "auto", "default", "scale", or for none.
	tierDefault = "default"
	// anthropicTier is the tier of every Messages reply: Anthropic has no
	// flex tier, and its priority tier is capacity bought ahead, which the
	// fake has none of.
	anthropicTier = "standard"
)

// servedTier is the OpenAI service tier a request that asked for
// requested (its body's service_tier; "" when absent or not a string) is
// served at: flex and priority as asked, else the default tier.
func servedTier(requested string) string {
	switch requested {
	case tierFlex, tierPriority:
		return requested
	}
	return tierDefault
}

// cachedTokens returns the input tokens of a reply with prompt input
// tokens that its usage reports as cached (HeaderCachedTokens): 0 without
// the header, at most prompt. A value that is not a non-negative integer
// is answered 400, and ok is false.
func (x *exchange) cachedTokens(prompt int) (n int, ok bool) {
	v := x.r.Header.Get(HeaderCachedTokens)
	if v == "" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		x.fail(http.StatusBadRequest, fmt.Sprintf("fakeprovider: header %s: %q is not a non-negative token count", HeaderCachedTokens, v))
		return 0, false
	}
	return min(n, prompt), true
}
