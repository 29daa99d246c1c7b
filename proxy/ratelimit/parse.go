package ratelimit

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Parse reads every dialect from h: OpenAI / OpenAI-compatible / Azure
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} (also Azure's
// x-rate-limit-* spelling), Anthropic
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
// the OpenAI-compatible hosts' own words (compatible.go: Together's
// x-ratelimit-{limit,remaining,reset} and x-tokenlimit-*, Fireworks'
// x-ratelimit-*-tokens-{prompt,generated} and x-ratelimit-over-limit,
// Mistral's x-ratelimitbysize-*-minute), and retry-after-ms / retry-after.
// now is the receipt time, used to turn absolute resets (RFC 3339, HTTP
// dates) into durations.
//
// When several spellings report the same dimension, Parse prefers
// x-ratelimit-* then x-rate-limit-* then anthropic-ratelimit-* then the
// compatible hosts' (Together's, then Mistral's for tokens; Fireworks'
// prompt and generated buckets fill InputTokens and OutputTokens after
// Anthropic's), taking the first spelling that reported a count; fields are
// never mixed across spellings. OpenAI's project-scoped x-ratelimit-*-project-tokens headers
// fill Tokens only when no x-ratelimit-*-tokens or x-rate-limit-*-tokens
// header reported a count. Other x-ratelimit-* names (such as
// x-ratelimit-limit-tokens_usage_based) are ignored.
//
// Counts are non-negative decimal integers, spaces trimmed; a limit of 0 or
// less, a negative remaining count (Azure's -1 sentinel) and anything
// unreadable are unknown. Resets are read by [ParseReset] and the retry hint
// by [ParseRetryAfter]. Like [http.Header.Get], Parse reads the first value
// of each canonical key, which is how net/http stores response headers.
func Parse(h http.Header, now time.Time) Observation {
	return parse(h, now, true)
}

// ParseMinute is [Parse] without the buckets that count a second
// (Together's x-ratelimit-{limit,remaining} and x-tokenlimit-*, Fireworks'
// x-ratelimit-*-tokens-{prompt,generated}), which it leaves unknown: what
// it reports counts a minute, as OpenAI, Azure, Anthropic and Mistral
// define their limits — except Groq's requests, a day's under OpenAI's
// names, which no header tells apart. It serves a reader that turns a
// limit into a rate.
func ParseMinute(h http.Header, now time.Time) Observation {
	return parse(h, now, false)
}

// parse is Parse, with the per-second buckets read only when perSecond.
func parse(h http.Header, now time.Time, perSecond bool) Observation {
	if len(h) == 0 {
		return Unknown()
	}
	xRequests, xTokens, xProject := openAI(h, now)
	azRequests, azTokens := azureLegacy(h, now)
	anRequests, anTokens, anInput, anOutput := anthropic(h, now)
	toRequests, toTokens := together(h, now)
	fwPrompt, fwGenerated, overLimit := fireworks(h, now)
	if !perSecond {
		toRequests, toTokens, fwPrompt, fwGenerated = unknownBucket(), unknownBucket(), unknownBucket(), unknownBucket()
	}
	o := Observation{
		Requests:     first(xRequests, azRequests, anRequests, toRequests),
		Tokens:       first(xTokens, azTokens, xProject, anTokens, toTokens, mistral(h, now)),
		InputTokens:  first(anInput, fwPrompt),
		OutputTokens: first(anOutput, fwGenerated),
		RetryAfter:   -1,
		OverLimit:    overLimit,
	}
	if d, ok := ParseRetryAfter(h, now); ok {
		o.RetryAfter = d
	}
	return o
}

// first returns the first Bucket that reported a count, or an unknown one.
func first(ws ...Bucket) Bucket {
	for _, w := range ws {
		if w.reported() {
			return w
		}
	}
	return unknownBucket()
}

// readBucket reads one dimension from the three canonical header names of
// one spelling.
func readBucket(h http.Header, now time.Time, limit, remaining, reset string) Bucket {
	w := Bucket{Limit: parseCount(get(h, limit)), Remaining: parseCount(get(h, remaining)), Reset: -1}
	if w.Limit == 0 {
		w.Limit = -1
	}
	if !w.reported() {
		return unknownBucket()
	}
	if d, ok := ParseReset(get(h, reset), now); ok {
		w.Reset = d
	}
	return w
}

// get returns the first value of the canonical key name, or "". Indexing
// the map directly skips the canonicalisation Header.Get repeats per call.
func get(h http.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// parseCount reads a non-negative decimal integer, spaces trimmed. Empty,
// signed, fractional, overflowing or otherwise unreadable values are -1.
func parseCount(v string) int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	var n int64
	for i := range len(v) {
		c := v[i]
		if c < '0' || c > '9' {
			return -1
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return -1
		}
		n = n*10 + d
	}
	return n
}

// ReadBucket reads one dimension as an event reports it rather than
// headers — a Realtime rate_limits.updated entry's limit, remaining and
// reset_seconds, each the text of a JSON number, "" when absent — by the
// rules Parse reads headers by: counts non-negative decimal integers, a
// limit of 0 unknown, the reset a plain decimal number of seconds within
// MaxDuration; a bucket that reports neither count is unknown.
func ReadBucket(limit, remaining, resetSeconds string) Bucket {
	w := Bucket{Limit: parseCount(limit), Remaining: parseCount(remaining), Reset: -1}
	if w.Limit == 0 {
		w.Limit = -1
	}
	if !w.reported() {
		return unknownBucket()
	}
	if d, ok := fromDecimal(strings.TrimSpace(resetSeconds), time.Second); ok {
		w.Reset = d
	}
	return w
}
