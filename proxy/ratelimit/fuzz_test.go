package ratelimit

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// fuzzHeaderNames are the headers FuzzParse fills: every name Parse reads,
// plus neighbours it must ignore.
var fuzzHeaderNames = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
	"x-ratelimit-limit-project-tokens", "x-ratelimit-remaining-project-tokens", "x-ratelimit-reset-project-tokens",
	"x-ratelimit-limit-tokens_usage_based", "x-ratelimit-remaining-tokens_usage_based", "x-ratelimit-reset-tokens_usage_based",
	"x-rate-limit-limit-requests", "x-rate-limit-remaining-requests", "x-rate-limit-reset-requests",
	"x-rate-limit-limit-tokens", "x-rate-limit-remaining-tokens", "x-rate-limit-reset-tokens",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
	"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
	"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
	"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
	"retry-after-ms", "x-ms-retry-after-ms", "retry-after",
}

// resetSeeds are every real-world reset value in docs/providers.md and the
// captures, plus edge cases.
var resetSeeds = []string{
	"1s", "6m0s", "3s", "12ms", "9ms", "80ms", "7.66s", "2m59.56s", "1m26.4s", "1h2m3.5s",
	"0", "10", "300", "55", "1.5", "-1", "-1s",
	"2025-08-21T12:40:59Z", "2025-08-21T07:41:00-05:00", "2025-08-21T12:40:00.5Z",
	"Thu, 21 Aug 2025 12:41:00 GMT", "", " ", "abc", "NaN", "Inf", "1e3", "0x10", "99999999999", "9999h",
}

func FuzzParseReset(f *testing.F) {
	for _, s := range resetSeeds {
		f.Add(s, receipt.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		d, ok := ParseReset(v, now)
		if !ok && d != 0 {
			t.Fatalf("ParseReset(%q) = (%v, false), want 0 with false", v, d)
		}
		if ok && (d < 0 || d > MaxDuration) {
			t.Fatalf("ParseReset(%q) = %v, outside [0, %v]", v, d, MaxDuration)
		}
		// Whatever the standard parsers accept, ParseReset reads the same way.
		trimmed := strings.TrimSpace(v)
		if want, err := time.ParseDuration(trimmed); err == nil && want >= 0 {
			if want = min(want, MaxDuration); !ok || d != want {
				t.Fatalf("ParseReset(%q) = (%v, %v), want Go duration %v", v, d, ok, want)
			}
		}
		if at, err := time.Parse(time.RFC3339, trimmed); err == nil {
			if want := until(at, now); !ok || d != want {
				t.Fatalf("ParseReset(%q) = (%v, %v), want RFC 3339 %v", v, d, ok, want)
			}
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	f.Add("2000", "", "", receipt.Unix())
	f.Add("1500", "", "2", receipt.Unix())
	f.Add("", "750", "9", receipt.Unix())
	f.Add("soon", "", "3", receipt.Unix())
	f.Add("-5", "NaN", "1.5", receipt.Unix())
	f.Add("", "", "56", receipt.Unix())
	f.Add("", "", "Thu, 21 Aug 2025 12:41:30 GMT", receipt.Unix())
	f.Add("", "", "Thursday, 21-Aug-25 12:41:30 GMT", receipt.Unix())
	f.Add("", "", "86400", receipt.Unix())
	f.Add("", "", "-1", receipt.Unix())
	f.Fuzz(func(t *testing.T, ms, xms, seconds string, nowUnix int64) {
		h := http.Header{}
		h.Set("retry-after-ms", ms)
		h.Set("x-ms-retry-after-ms", xms)
		h.Set("retry-after", seconds)
		d, ok := ParseRetryAfter(h, time.Unix(nowUnix, 0))
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q, %q, %q) = (%v, false), want 0 with false", ms, xms, seconds, d)
		}
		if ok && (d < 0 || d > MaxDuration) {
			t.Fatalf("ParseRetryAfter(%q, %q, %q) = %v, outside [0, %v]", ms, xms, seconds, d, MaxDuration)
		}
		// A usable retry-after-ms always wins.
		if want, wantOK := fromDecimal(strings.TrimSpace(ms), time.Millisecond); wantOK && (!ok || d != want) {
			t.Fatalf("ParseRetryAfter(%q, %q, %q) = (%v, %v), want retry-after-ms %v", ms, xms, seconds, d, ok, want)
		}
	})
}

// FuzzParse assigns the newline-separated values of data to
// fuzzHeaderNames in turn, cycling when there are fewer values than names.
func FuzzParse(f *testing.F) {
	f.Add("60\n59\n1s\n150000\n149984\n6m0s\n60000\n57000\n3s", receipt.Unix())
	f.Add("-1", receipt.Unix())
	f.Add("-1\n-1\n0", receipt.Unix())
	f.Add("60\n59\n10\n150000\n149984\n300", receipt.Unix())
	f.Add("1000\n999\n2025-08-21T12:40:59Z\n80000\n0\n2025-08-21T07:41:00-05:00", receipt.Unix())
	f.Add("abc\n\n 12 \n1e3\nNaN\n99999999999999999999", receipt.Unix())
	for _, s := range resetSeeds {
		f.Add(s, receipt.Unix())
	}
	f.Fuzz(func(t *testing.T, data string, nowUnix int64) {
		values := strings.Split(data, "\n")
		h := http.Header{}
		for i, name := range fuzzHeaderNames {
			h.Set(name, values[i%len(values)])
		}
		o := Parse(h, time.Unix(nowUnix, 0))
		checkObservation(t, o)
		m := ParseMinute(h, time.Unix(nowUnix, 0))
		checkObservation(t, m)
		if m.Requests.reported() && m.Requests != o.Requests || m.Tokens.reported() && m.Tokens != o.Tokens {
			t.Fatalf("ParseMinute %+v disagrees with Parse %+v where it reports", m, o)
		}
		for _, refill := range []Refill{RefillContinuous, RefillWindow} {
			if hold, below := o.BelowReserve(0, refill); below || hold != 0 {
				t.Fatalf("BelowReserve(0, %s) = (%v, %v) for %+v, want (0, false)", refill, hold, below, o)
			}
			if hold, below := o.BelowReserve(1, refill); hold < 0 || hold > MaxDuration || (!below && hold != 0) {
				t.Fatalf("BelowReserve(1, %s) = (%v, %v) for %+v", refill, hold, below, o)
			}
		}
	})
}
