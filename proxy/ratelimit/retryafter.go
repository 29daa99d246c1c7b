package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

// Canonical names of the retry hints, most precise first. retry-after-ms is
// Azure's (and read first by the OpenAI and Anthropic SDKs);
// x-ms-retry-after-ms is the Azure core SDKs' second choice.
const (
	hdrRetryAfterMs   = "Retry-After-Ms"
	hdrMsRetryAfterMs = "X-Ms-Retry-After-Ms"
	hdrRetryAfter     = "Retry-After"
)

// ParseRetryAfter reads the upstream's retry hint from h, measured from now,
// the response's receipt time: retry-after-ms (a decimal number of
// milliseconds, fractions allowed) first, then x-ms-retry-after-ms, then
// Retry-After (integer or decimal seconds as the SDKs accept, or an HTTP
// date per RFC 9110, read as the time until then). A hint that is negative,
// NaN or garbage is skipped in favour of the next header; a date already
// past is 0 and anything longer than [MaxDuration] is MaxDuration. It
// returns (0, false) when no header holds a usable hint.
//
// Absence is itself a signal the caller should weigh: Anthropic's spend cap
// and OpenAI's quota errors answer 429 without Retry-After.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	for _, name := range [...]string{hdrRetryAfterMs, hdrMsRetryAfterMs} {
		if d, ok := fromDecimal(strings.TrimSpace(get(h, name)), time.Millisecond); ok {
			return d, true
		}
	}
	v := strings.TrimSpace(get(h, hdrRetryAfter))
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		return fromDecimal(v, time.Second)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return until(t, now), true
}
