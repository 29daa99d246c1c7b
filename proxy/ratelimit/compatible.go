package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

// Canonical names of the headers OpenAI-compatible hosts send in words of
// their own, beside or instead of OpenAI's x-ratelimit-*-{requests,tokens}:
//
//   - Together: x-ratelimit-{limit,remaining,reset} (requests a second,
//     the reset in seconds) and x-tokenlimit-{limit,remaining} (tokens a
//     second);
//   - Fireworks: x-ratelimit-{limit,remaining}-tokens-{prompt,generated}
//     (tokens a second, by direction) and x-ratelimit-over-limit: yes
//     when the account is over its rate and served at lower priority;
//   - Mistral: x-ratelimitbysize-{limit,remaining}-minute (tokens a
//     minute; no request counts).
//
//nolint:gosec // G101: header names that contain "Tokens", not credentials.
const (
	hdrTogetherLimit     = "X-Ratelimit-Limit"
	hdrTogetherRemaining = "X-Ratelimit-Remaining"
	hdrTogetherReset     = "X-Ratelimit-Reset"

	hdrTogetherLimitTokens     = "X-Tokenlimit-Limit"
	hdrTogetherRemainingTokens = "X-Tokenlimit-Remaining"

	hdrFwLimitPrompt        = "X-Ratelimit-Limit-Tokens-Prompt"
	hdrFwRemainingPrompt    = "X-Ratelimit-Remaining-Tokens-Prompt"
	hdrFwLimitGenerated     = "X-Ratelimit-Limit-Tokens-Generated"
	hdrFwRemainingGenerated = "X-Ratelimit-Remaining-Tokens-Generated"
	hdrFwOverLimit          = "X-Ratelimit-Over-Limit"

	hdrMistralLimitMinute     = "X-Ratelimitbysize-Limit-Minute"
	hdrMistralRemainingMinute = "X-Ratelimitbysize-Remaining-Minute"
)

// together reads Together's per-second requests and tokens buckets.
func together(h http.Header, now time.Time) (requests, tokens Bucket) {
	requests = readBucket(h, now, hdrTogetherLimit, hdrTogetherRemaining, hdrTogetherReset)
	tokens = readBucket(h, now, hdrTogetherLimitTokens, hdrTogetherRemainingTokens, "")
	return requests, tokens
}

// fireworks reads Fireworks' per-second prompt and generated token
// buckets, and whether it says the account is over its limit (the value
// "yes", case and spaces aside; anything else is not).
func fireworks(h http.Header, now time.Time) (prompt, generated Bucket, overLimit bool) {
	prompt = readBucket(h, now, hdrFwLimitPrompt, hdrFwRemainingPrompt, "")
	generated = readBucket(h, now, hdrFwLimitGenerated, hdrFwRemainingGenerated, "")
	return prompt, generated, strings.EqualFold(strings.TrimSpace(get(h, hdrFwOverLimit)), "yes")
}

// mistral reads Mistral's tokens-a-minute bucket.
func mistral(h http.Header, now time.Time) Bucket {
	return readBucket(h, now, hdrMistralLimitMinute, hdrMistralRemainingMinute, "")
}
