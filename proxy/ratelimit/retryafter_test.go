package ratelimit

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		kv   []string
		want time.Duration
		ok   bool
	}{
		{"none", nil, 0, false},
		{"openai seconds", []string{"retry-after", "56"}, 56 * time.Second, true},
		{"azure ms", []string{"retry-after-ms", "2000"}, 2 * time.Second, true},
		{"ms preferred over seconds", []string{"retry-after", "2", "retry-after-ms", "1500"}, 1500 * time.Millisecond, true},
		{"fractional ms", []string{"retry-after-ms", "12.5"}, 12500 * time.Microsecond, true},
		{"x-ms ms", []string{"x-ms-retry-after-ms", "750"}, 750 * time.Millisecond, true},
		{"retry-after-ms preferred over x-ms", []string{"x-ms-retry-after-ms", "750", "retry-after-ms", "250"}, 250 * time.Millisecond, true},
		{"x-ms preferred over seconds", []string{"retry-after", "9", "x-ms-retry-after-ms", "750"}, 750 * time.Millisecond, true},
		{"garbage ms falls back", []string{"retry-after-ms", "soon", "retry-after", "3"}, 3 * time.Second, true},
		{"negative ms falls back", []string{"retry-after-ms", "-5", "retry-after", "3"}, 3 * time.Second, true},
		{"NaN ms falls back", []string{"retry-after-ms", "NaN", "retry-after", "3"}, 3 * time.Second, true},
		{"empty ms falls back", []string{"retry-after-ms", "", "retry-after", "3"}, 3 * time.Second, true},
		{"float seconds", []string{"retry-after", "1.5"}, 1500 * time.Millisecond, true},
		{"zero", []string{"retry-after", "0"}, 0, true},
		{"spaces trimmed", []string{"retry-after", " 7 "}, 7 * time.Second, true},
		{"http date IMF-fixdate", []string{"retry-after", "Thu, 21 Aug 2025 12:41:30 GMT"}, 90 * time.Second, true},
		{"http date RFC 850", []string{"retry-after", "Thursday, 21-Aug-25 12:41:30 GMT"}, 90 * time.Second, true},
		{"http date asctime", []string{"retry-after", "Thu Aug 21 12:41:30 2025"}, 90 * time.Second, true},
		{"http date past", []string{"retry-after", "Thu, 21 Aug 2025 12:00:00 GMT"}, 0, true},
		{"azure daily quota capped", []string{"retry-after", "86400"}, MaxDuration, true},
		{"huge capped", []string{"retry-after", "99999999999"}, MaxDuration, true},
		{"huge ms capped", []string{"retry-after-ms", "99999999999999"}, MaxDuration, true},
		{"negative", []string{"retry-after", "-1"}, 0, false},
		{"NaN", []string{"retry-after", "NaN"}, 0, false},
		{"Inf", []string{"retry-after", "+Inf"}, 0, false},
		{"exponent", []string{"retry-after", "1e3"}, 0, false},
		{"garbage", []string{"retry-after", "later"}, 0, false},
		{"go duration is not a retry hint", []string{"retry-after", "5s"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(header(tt.kv...), receipt)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = (%v, %v), want (%v, %v)", tt.kv, got, ok, tt.want, tt.ok)
			}
		})
	}
}
