package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestParseReset(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		// OpenAI documented examples and observed values.
		{"openai 1s", "1s", time.Second, true},
		{"openai 6m0s", "6m0s", 6 * time.Minute, true},
		{"openai project 3s", "3s", 3 * time.Second, true},
		{"openai 12ms", "12ms", 12 * time.Millisecond, true},
		{"openai 9ms", "9ms", 9 * time.Millisecond, true},
		// Groq documentation examples and a Groq capture.
		{"groq 7.66s", "7.66s", 7660 * time.Millisecond, true},
		{"groq 2m59.56s", "2m59.56s", 2*time.Minute + 59560*time.Millisecond, true},
		{"groq 1m26.4s", "1m26.4s", time.Minute + 26400*time.Millisecond, true},
		{"go hours", "1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"zero", "0", 0, true},
		{"zero seconds", "0s", 0, true},
		// Azure bare seconds.
		{"azure 10", "10", 10 * time.Second, true},
		{"azure 300", "300", 300 * time.Second, true},
		{"azure 2023 55", "55", 55 * time.Second, true},
		{"fractional seconds", "1.5", 1500 * time.Millisecond, true},
		{"trailing dot", "2.", 2 * time.Second, true},
		{"leading dot", ".25", 250 * time.Millisecond, true},
		{"spaces trimmed", "  6m0s\t", 6 * time.Minute, true},
		// Anthropic RFC 3339, relative to receipt (12:40:00Z).
		{"anthropic Z", "2025-08-21T12:40:59Z", 59 * time.Second, true},
		{"offset -05:00", "2025-08-21T07:41:00-05:00", time.Minute, true},
		{"offset +00:00", "2025-08-21T12:41:00+00:00", time.Minute, true},
		{"fractional timestamp", "2025-08-21T12:40:00.5Z", 500 * time.Millisecond, true},
		{"timestamp now", "2025-08-21T12:40:00Z", 0, true},
		{"timestamp past clamps to 0", "2025-08-21T12:39:00Z", 0, true},
		{"timestamp far future capped", "2999-01-01T00:00:00Z", MaxDuration, true},
		// HTTP dates.
		{"http date", "Thu, 21 Aug 2025 12:41:00 GMT", time.Minute, true},
		{"http date past", "Thu, 21 Aug 2025 12:00:00 GMT", 0, true},
		// Bounds.
		{"huge duration capped", "9999h", MaxDuration, true},
		{"huge number capped", "99999999999", MaxDuration, true},
		{"cap exactly", "86400", MaxDuration, true},
		{"max int64 seconds capped", "9223372036854775807", MaxDuration, true},
		{"beyond float64 capped", strings.Repeat("9", 400), MaxDuration, true},
		{"underflow is zero", "0." + strings.Repeat("0", 400) + "1", 0, true},
		// Unknown, never exhausted.
		{"azure sentinel -1", "-1", 0, false},
		{"negative duration", "-1s", 0, false},
		{"negative fraction", "-0.5", 0, false},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"garbage", "abc", 0, false},
		{"NaN", "NaN", 0, false},
		{"Inf", "Inf", 0, false},
		{"+Inf", "+Inf", 0, false},
		{"exponent", "1e3", 0, false},
		{"hex", "0x10", 0, false},
		{"two dots", "1.2.3", 0, false},
		{"lone dot", ".", 0, false},
		{"unit only", "s", 0, false},
		{"trailing garbage", "1s garbage", 0, false},
		{"bad month", "2025-13-45T00:00:00Z", 0, false},
		{"date without time", "2025-08-21", 0, false},
		{"NUL bytes", "1\x00", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseReset(tt.in, receipt)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseReset(%q) = (%v, %v), want (%v, %v)", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}
