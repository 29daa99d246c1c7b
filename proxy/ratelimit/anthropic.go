package ratelimit

import (
	"net/http"
	"time"
)

// Canonical names of Anthropic's anthropic-ratelimit-* headers. Resets are
// absolute RFC 3339 times; token remainders are rounded to the nearest
// thousand. The Priority Tier (anthropic-priority-*) and fast-mode headers
// are not read.
//
//nolint:gosec // G101: header names that contain "Tokens", not credentials.
const (
	hdrAnLimitRequests     = "Anthropic-Ratelimit-Requests-Limit"
	hdrAnRemainingRequests = "Anthropic-Ratelimit-Requests-Remaining"
	hdrAnResetRequests     = "Anthropic-Ratelimit-Requests-Reset"

	hdrAnLimitTokens     = "Anthropic-Ratelimit-Tokens-Limit"
	hdrAnRemainingTokens = "Anthropic-Ratelimit-Tokens-Remaining"
	hdrAnResetTokens     = "Anthropic-Ratelimit-Tokens-Reset"

	hdrAnLimitInputTokens     = "Anthropic-Ratelimit-Input-Tokens-Limit"
	hdrAnRemainingInputTokens = "Anthropic-Ratelimit-Input-Tokens-Remaining"
	hdrAnResetInputTokens     = "Anthropic-Ratelimit-Input-Tokens-Reset"

	hdrAnLimitOutputTokens     = "Anthropic-Ratelimit-Output-Tokens-Limit"
	hdrAnRemainingOutputTokens = "Anthropic-Ratelimit-Output-Tokens-Remaining"
	hdrAnResetOutputTokens     = "Anthropic-Ratelimit-Output-Tokens-Reset"
)

// anthropic reads the anthropic-ratelimit-* dialect. tokens is the "most
// restrictive limit currently in effect", whose meaning shifts with
// workspace limits; input and output are the stable per-direction buckets.
func anthropic(h http.Header, now time.Time) (requests, tokens, input, output Bucket) {
	requests = readBucket(h, now, hdrAnLimitRequests, hdrAnRemainingRequests, hdrAnResetRequests)
	tokens = readBucket(h, now, hdrAnLimitTokens, hdrAnRemainingTokens, hdrAnResetTokens)
	input = readBucket(h, now, hdrAnLimitInputTokens, hdrAnRemainingInputTokens, hdrAnResetInputTokens)
	output = readBucket(h, now, hdrAnLimitOutputTokens, hdrAnRemainingOutputTokens, hdrAnResetOutputTokens)
	return requests, tokens, input, output
}
