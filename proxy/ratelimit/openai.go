package ratelimit

import (
	"net/http"
	"time"
)

// Canonical names of the x-ratelimit-* headers sent by OpenAI, Azure OpenAI
// and OpenAI-compatible servers (Groq, …). OpenAI and Groq send resets as Go
// durations ("6m0s", "7.66s"), Azure as bare seconds ("300"). For Groq the
// requests limit is per day, the tokens limit per minute.
//
//nolint:gosec // G101: header names that contain "Tokens", not credentials.
const (
	hdrLimitRequests     = "X-Ratelimit-Limit-Requests"
	hdrRemainingRequests = "X-Ratelimit-Remaining-Requests"
	hdrResetRequests     = "X-Ratelimit-Reset-Requests"
	hdrLimitTokens       = "X-Ratelimit-Limit-Tokens"
	hdrRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	hdrResetTokens       = "X-Ratelimit-Reset-Tokens"

	// OpenAI's project-scoped token limit, sent when one applies.
	hdrLimitProjectTokens     = "X-Ratelimit-Limit-Project-Tokens"
	hdrRemainingProjectTokens = "X-Ratelimit-Remaining-Project-Tokens"
	hdrResetProjectTokens     = "X-Ratelimit-Reset-Project-Tokens"
)

// Canonical names of Azure OpenAI's older x-rate-limit-* spelling, seen in
// 2023 captures (x-rate-limit-reset-tokens: 55).
//
//nolint:gosec // G101: header names that contain "Tokens", not credentials.
const (
	hdrAzLimitRequests     = "X-Rate-Limit-Limit-Requests"
	hdrAzRemainingRequests = "X-Rate-Limit-Remaining-Requests"
	hdrAzResetRequests     = "X-Rate-Limit-Reset-Requests"
	hdrAzLimitTokens       = "X-Rate-Limit-Limit-Tokens"
	hdrAzRemainingTokens   = "X-Rate-Limit-Remaining-Tokens"
	hdrAzResetTokens       = "X-Rate-Limit-Reset-Tokens"
)

// openAI reads the x-ratelimit-* dialect: requests, tokens and the
// project-scoped tokens bucket.
func openAI(h http.Header, now time.Time) (requests, tokens, projectTokens Bucket) {
	requests = readBucket(h, now, hdrLimitRequests, hdrRemainingRequests, hdrResetRequests)
	tokens = readBucket(h, now, hdrLimitTokens, hdrRemainingTokens, hdrResetTokens)
	projectTokens = readBucket(h, now, hdrLimitProjectTokens, hdrRemainingProjectTokens, hdrResetProjectTokens)
	return requests, tokens, projectTokens
}

// azureLegacy reads Azure's x-rate-limit-* spelling of the same headers.
func azureLegacy(h http.Header, now time.Time) (requests, tokens Bucket) {
	requests = readBucket(h, now, hdrAzLimitRequests, hdrAzRemainingRequests, hdrAzResetRequests)
	tokens = readBucket(h, now, hdrAzLimitTokens, hdrAzRemainingTokens, hdrAzResetTokens)
	return requests, tokens
}

// AzureSpelling reports whether h carries Azure's x-rate-limit-* spelling,
// which only Azure OpenAI sends: the dialect of a response whose path does
// not say it.
func AzureSpelling(h http.Header) bool {
	for _, name := range [...]string{hdrAzLimitRequests, hdrAzRemainingRequests, hdrAzResetRequests,
		hdrAzLimitTokens, hdrAzRemainingTokens, hdrAzResetTokens} {
		if _, ok := h[name]; ok {
			return true
		}
	}
	return false
}
