package ratelimit

import (
	"math"
	"strconv"
	"time"
)

// isDecimal reports whether v is a plain non-negative decimal number: at
// least one digit and at most one '.', nothing else. It excludes what
// strconv.ParseFloat would also take — signs, exponents, hex, "NaN", "Inf",
// underscores — so none of those can become a duration.
func isDecimal(v string) bool {
	digits, dot := false, false
	for i := range len(v) {
		switch c := v[i]; {
		case isDigit(c):
			digits = true
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits
}

// fromDecimal converts the decimal number v, counted in unit, to a
// duration in [0, MaxDuration], rounded to the nearest nanosecond; a number
// too large even for a float64 is MaxDuration. It returns (0, false) when v
// is not a decimal number.
func fromDecimal(v string, unit time.Duration) (time.Duration, bool) {
	if !isDecimal(v) {
		return 0, false
	}
	// On a decimal string ParseFloat can only fail by overflowing, and then
	// returns +Inf, which the cap below absorbs.
	f, _ := strconv.ParseFloat(v, 64)
	if f >= float64(MaxDuration)/float64(unit) {
		return MaxDuration, true
	}
	return min(time.Duration(math.Round(f*float64(unit))), MaxDuration), true
}

// until returns the time from now to t in [0, MaxDuration].
func until(t, now time.Time) time.Duration {
	return min(max(t.Sub(now), 0), MaxDuration)
}
