package ratelimit

import (
	"testing"
	"time"
)

func BenchmarkParse(b *testing.B) {
	sets := []struct {
		name string
		kv   []string
	}{
		{"openai", []string{
			"x-ratelimit-limit-requests", "5000",
			"x-ratelimit-limit-tokens", "800000",
			"x-ratelimit-remaining-requests", "4999",
			"x-ratelimit-remaining-tokens", "799986",
			"x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-reset-tokens", "6m0s",
		}},
		{"azure", []string{
			"x-ratelimit-limit-requests", "60",
			"x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-requests", "59",
			"x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "10",
			"x-ratelimit-reset-tokens", "300",
			"retry-after-ms", "2000",
		}},
		{"anthropic", []string{
			"anthropic-ratelimit-input-tokens-limit", "80000",
			"anthropic-ratelimit-input-tokens-remaining", "80000",
			"anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z",
			"anthropic-ratelimit-output-tokens-limit", "16000",
			"anthropic-ratelimit-output-tokens-remaining", "16000",
			"anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00Z",
			"anthropic-ratelimit-requests-limit", "1000",
			"anthropic-ratelimit-requests-remaining", "999",
			"anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z",
			"anthropic-ratelimit-tokens-limit", "96000",
			"anthropic-ratelimit-tokens-remaining", "96000",
			"anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z",
		}},
	}
	now := receipt.Add(30 * time.Second)
	for _, s := range sets {
		b.Run(s.name, func(b *testing.B) {
			h := header(s.kv...)
			b.ReportAllocs()
			for b.Loop() {
				Parse(h, now)
			}
		})
	}
}
