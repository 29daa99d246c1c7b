package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

// ParseReset reads one reset value as the time until the bucket is full
// again, measured from now, the response's receipt time. It accepts
//
//   - a Go duration, as OpenAI and Groq send: "1s", "6m0s", "12ms", "7.66s",
//     "2m59.56s", "0";
//   - a bare non-negative decimal number of seconds, as Azure sends: "10",
//     "300", "1.5";
//   - an RFC 3339 time, as Anthropic sends: "2025-08-21T12:40:59Z" or with an
//     offset such as "-05:00", read as the time until then;
//   - an HTTP date (RFC 9110), read the same way.
//
// Surrounding spaces are ignored. A time already past is 0; anything longer
// than [MaxDuration] is MaxDuration. Negative values (Azure's "-1"), NaN,
// Inf, exponents, empty strings and garbage return (0, false).
func ParseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return 0, false
	case isDecimal(v):
		return fromDecimal(v, time.Second)
	case isRFC3339Shape(v):
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, false
		}
		return until(t, now), true
	case isLetter(v[0]):
		// No Go duration starts with a letter; an HTTP date does ("Thu, …").
		t, err := http.ParseTime(v)
		if err != nil {
			return 0, false
		}
		return until(t, now), true
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, false
		}
		return min(d, MaxDuration), true
	}
}

// isRFC3339Shape reports whether v starts like an RFC 3339 date
// ("2025-08-21T…"). Choosing the parser by shape keeps the common formats
// off the error paths of the others, which allocate.
func isRFC3339Shape(v string) bool {
	return len(v) > len("2006-01-02") && isDigit(v[0]) && isDigit(v[1]) && isDigit(v[2]) && isDigit(v[3]) && v[4] == '-'
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
