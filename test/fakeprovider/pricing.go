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

// HeaderInputTokens makes a reply's usage report this many input tokens
// instead of a quarter of the body's bytes: what a provider bills for
// input the body does not show (an earlier response named by
// previous_response_id, an image by URL, a file, a server tool's
// findings). It changes no rate-limit charge.
//
//nolint:gosec // G101: a header name that contains "Tokens", not a credential.
const HeaderInputTokens = "X-Fake-Input-Tokens"

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

// promptUsage returns the input tokens a reply's usage reports — the
// body's (promptTokens), or HeaderInputTokens' — and how many of them it
// reports as cached (HeaderCachedTokens: 0 without it, at most all). A
// header that is not a non-negative integer is answered 400, and ok is
// false.
func (x *exchange) promptUsage() (in, cached int, ok bool) {
	if in, ok = x.tokenHeader(HeaderInputTokens, promptTokens(x.body)); !ok {
		return 0, 0, false
	}
	cached, ok = x.tokenHeader(HeaderCachedTokens, 0)
	return in, min(cached, in), ok
}

// tokenHeader returns the token count header name says, or def without
// it. A value that is not a non-negative integer is answered 400, and ok
// is false.
func (x *exchange) tokenHeader(name string, def int) (n int, ok bool) {
	v := x.r.Header.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		x.fail(http.StatusBadRequest, fmt.Sprintf("fakeprovider: header %s: %q is not a non-negative token count", name, v))
		return 0, false
	}
	return n, true
}
