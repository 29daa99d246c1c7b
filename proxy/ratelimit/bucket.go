package ratelimit

import "time"

// MaxDuration bounds every duration the package returns: resets, retry
// hints and holds. It is long enough for a daily quota (Azure answers
// "retry after 86400 seconds") and short enough that a garbage value cannot
// hold traffic forever.
const MaxDuration = 24 * time.Hour

// Bucket is the provider's rate-limit bucket for one dimension (requests
// or tokens), as the upstream reported it: meterproxy's own one-second
// windows are quota's, the provider's buckets are these. Unknown
// fields are -1.
//
// A Bucket from [Parse] is either entirely unknown or has a positive Limit
// or a non-negative Remaining (or both); a reset reported without either
// count describes nothing and is dropped. The zero Bucket is not Known.
type Bucket struct {
	Limit     int64         // -1 unknown
	Remaining int64         // -1 unknown
	Reset     time.Duration // time until the bucket is full again (relative to the response's receipt); -1 unknown
}

// Known reports whether both counts were reported, which is what a reserve
// needs: Limit > 0 && Remaining >= 0.
func (w Bucket) Known() bool { return w.Limit > 0 && w.Remaining >= 0 }

// reported reports whether the upstream said anything countable about w.
func (w Bucket) reported() bool { return w.Limit > 0 || w.Remaining >= 0 }

// unknownBucket returns a Bucket with every field unknown.
func unknownBucket() Bucket { return Bucket{Limit: -1, Remaining: -1, Reset: -1} }

// Observation is everything one response's headers said.
//
// Tokens is the provider's combined token bucket (for Anthropic, "the most
// restrictive limit currently in effect"); InputTokens and OutputTokens are
// Anthropic's separate families. Use [Unknown], not the zero value, for
// "nothing was reported": the zero Observation is never below a reserve but
// its RetryAfter of 0 reads as "retry now".
type Observation struct {
	Requests, Tokens, InputTokens, OutputTokens Bucket
	// RetryAfter is the upstream's retry hint (retry-after-ms preferred over retry-after); -1 none.
	RetryAfter time.Duration
	// OverLimit says the upstream serves the account at lower priority
	// because it is over its rate (Fireworks' x-ratelimit-over-limit:
	// yes): below any reserve, whatever the counts say.
	OverLimit bool
}

// Unknown returns an Observation in which every field is -1.
func Unknown() Observation {
	return Observation{
		Requests:     unknownBucket(),
		Tokens:       unknownBucket(),
		InputTokens:  unknownBucket(),
		OutputTokens: unknownBucket(),
		RetryAfter:   -1,
	}
}
