package ratelimit

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// Date headers of the captured responses, used as their receipt times.
	anthropic2025 := time.Date(2025, 8, 21, 12, 41, 0, 0, time.UTC)
	anthropic2024 := time.Date(2024, 10, 15, 9, 48, 23, 0, time.UTC)

	tests := []struct {
		name string
		now  time.Time
		kv   []string
		want Observation
	}{
		{
			name: "openai documented table",
			kv: []string{
				"retry-after", "56",
				"x-ratelimit-limit-requests", "60",
				"x-ratelimit-limit-tokens", "150000",
				"x-ratelimit-remaining-requests", "59",
				"x-ratelimit-remaining-tokens", "149984",
				"x-ratelimit-reset-requests", "1s",
				"x-ratelimit-reset-tokens", "6m0s",
				"x-ratelimit-limit-project-tokens", "60000",
				"x-ratelimit-remaining-project-tokens", "57000",
				"x-ratelimit-reset-project-tokens", "3s",
			},
			want: Observation{
				Requests:     win(60, 59, time.Second),
				Tokens:       win(150000, 149984, 6*time.Minute),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   56 * time.Second,
			},
		},
		{
			// edubruell/tidyllm tests/testthat/openai/…/chat/completions-f382f0-POST.R (2025-11-16).
			name: "openai capture",
			kv: []string{
				"openai-organization", "user-j2dlcmauhfkzofrqjehceoc7",
				"openai-processing-ms", "1219",
				"openai-version", "2020-10-01",
				"x-ratelimit-limit-requests", "5000",
				"x-ratelimit-limit-tokens", "800000",
				"x-ratelimit-remaining-requests", "4999",
				"x-ratelimit-remaining-tokens", "799986",
				"x-ratelimit-reset-requests", "12ms",
				"x-ratelimit-reset-tokens", "1ms",
				"x-request-id", "req_ca8197062dd44e208e21ceef70b46fce",
			},
			want: Observation{
				Requests:     win(5000, 4999, 12*time.Millisecond),
				Tokens:       win(800000, 799986, time.Millisecond),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "openai project tokens fill in for absent plain tokens",
			kv: []string{
				"x-ratelimit-limit-requests", "60",
				"x-ratelimit-remaining-requests", "59",
				"x-ratelimit-reset-requests", "1s",
				"x-ratelimit-limit-project-tokens", "60000",
				"x-ratelimit-remaining-project-tokens", "57000",
				"x-ratelimit-reset-project-tokens", "3s",
			},
			want: Observation{
				Requests:     win(60, 59, time.Second),
				Tokens:       win(60000, 57000, 3*time.Second),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "openai usage_based names are ignored",
			kv: []string{
				"x-ratelimit-limit-tokens_usage_based", "40000",
				"x-ratelimit-remaining-tokens_usage_based", "0",
				"x-ratelimit-reset-tokens_usage_based", "6m0s",
			},
			want: Unknown(),
		},
		{
			name: "openai usage_based beside plain tokens",
			kv: []string{
				"x-ratelimit-limit-tokens", "150000",
				"x-ratelimit-remaining-tokens", "149984",
				"x-ratelimit-reset-tokens", "6m0s",
				"x-ratelimit-limit-tokens_usage_based", "40000",
				"x-ratelimit-remaining-tokens_usage_based", "0",
				"x-ratelimit-reset-tokens_usage_based", "1h",
			},
			want: Observation{
				Requests:     unknownBucket(),
				Tokens:       win(150000, 149984, 6*time.Minute),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "azure documented table",
			kv: []string{
				"x-ratelimit-limit-requests", "60",
				"x-ratelimit-limit-tokens", "150000",
				"x-ratelimit-remaining-requests", "59",
				"x-ratelimit-remaining-tokens", "149984",
				"x-ratelimit-reset-requests", "10",
				"x-ratelimit-reset-tokens", "300",
				"retry-after-ms", "2000",
			},
			want: Observation{
				Requests:     win(60, 59, 10*time.Second),
				Tokens:       win(150000, 149984, 300*time.Second),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   2 * time.Second,
			},
		},
		{
			name: "azure x-rate-limit spelling",
			kv: []string{
				"x-rate-limit-limit-requests", "60",
				"x-rate-limit-remaining-requests", "0",
				"x-rate-limit-reset-requests", "10",
				"x-rate-limit-limit-tokens", "150000",
				"x-rate-limit-remaining-tokens", "1200",
				"x-rate-limit-reset-tokens", "55",
			},
			want: Observation{
				Requests:     win(60, 0, 10*time.Second),
				Tokens:       win(150000, 1200, 55*time.Second),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// openai/openai-python#937 (2023): a 429 with both spellings and no Retry-After.
			name: "azure 2023 capture mixes spellings",
			kv: []string{
				"apim-request-id", "0f0d5f5c-0000-0000-0000-000000000000",
				"policy-id", "DeploymentRatelimit-Token",
				"x-ms-region", "West US",
				"x-ratelimit-remaining-requests", "119",
				"x-rate-limit-reset-tokens", "55",
			},
			want: Observation{
				Requests:     win(-1, 119, -1),
				Tokens:       unknownBucket(), // a reset alone has no count
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "x-ratelimit preferred over x-rate-limit and anthropic",
			kv: []string{
				"x-ratelimit-limit-requests", "60",
				"x-ratelimit-remaining-requests", "59",
				"x-rate-limit-limit-requests", "600",
				"x-rate-limit-remaining-requests", "0",
				"x-rate-limit-reset-requests", "10",
				"anthropic-ratelimit-requests-limit", "1000",
				"anthropic-ratelimit-requests-remaining", "0",
				"x-rate-limit-limit-tokens", "150000",
				"x-rate-limit-remaining-tokens", "1200",
				"anthropic-ratelimit-tokens-limit", "96000",
				"anthropic-ratelimit-tokens-remaining", "0",
			},
			want: Observation{
				Requests:     win(60, 59, -1), // fields never mixed across spellings
				Tokens:       win(150000, 1200, -1),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// openai/openai-dotnet#838: Azure Responses API (GPT-4.1), Nov 2025.
			name: "azure -1 sentinel is unknown not exhausted",
			kv: []string{
				"x-ratelimit-limit-requests", "100",
				"x-ratelimit-remaining-requests", "99",
				"x-ratelimit-reset-requests", "60",
				"x-ratelimit-limit-tokens", "-1",
				"x-ratelimit-remaining-tokens", "-1",
				"x-ratelimit-reset-tokens", "0",
			},
			want: Observation{
				Requests:     win(100, 99, time.Minute),
				Tokens:       unknownBucket(),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "azure remaining only",
			kv: []string{
				"x-ratelimit-remaining-requests", "45",
				"x-ratelimit-remaining-tokens", "0",
			},
			want: Observation{
				Requests:     win(-1, 45, -1),
				Tokens:       win(-1, 0, -1),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// edubruell/tidyllm tests/testthat/claude/…/messages-f84379-POST.R (2025-08-21);
			// every reset is at or before the Date header, so every reset is 0.
			name: "anthropic capture 2025",
			now:  anthropic2025,
			kv: []string{
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
				"request-id", "req_011CSLsW7mFqvHHnzrKdKjAE",
				"anthropic-organization-id", "36562039-1ae4-48e6-ae28-1e517e3d2d12",
			},
			want: Observation{
				Requests:     win(1000, 999, 0),
				Tokens:       win(96000, 96000, 0),
				InputTokens:  win(80000, 80000, 0),
				OutputTokens: win(16000, 16000, 0),
				RetryAfter:   -1,
			},
		},
		{
			// edubruell/tidyllm tests/testthat/claude/…/messages-e050b5-POST.R (2024-10-15).
			name: "anthropic capture 2024",
			now:  anthropic2024,
			kv: []string{
				"anthropic-ratelimit-requests-limit", "50",
				"anthropic-ratelimit-requests-remaining", "49",
				"anthropic-ratelimit-requests-reset", "2024-10-15T09:49:10Z",
				"anthropic-ratelimit-tokens-limit", "40000",
				"anthropic-ratelimit-tokens-remaining", "40000",
				"anthropic-ratelimit-tokens-reset", "2024-10-15T09:48:23Z",
			},
			want: Observation{
				Requests:     win(50, 49, 47*time.Second),
				Tokens:       win(40000, 40000, 0),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "anthropic 429 with offset reset and retry-after",
			kv: []string{
				"retry-after", "30",
				"anthropic-ratelimit-output-tokens-limit", "16000",
				"anthropic-ratelimit-output-tokens-remaining", "0",
				"anthropic-ratelimit-output-tokens-reset", "2025-08-21T07:40:30-05:00",
			},
			want: Observation{
				Requests:     unknownBucket(),
				Tokens:       unknownBucket(),
				InputTokens:  unknownBucket(),
				OutputTokens: win(16000, 0, 30*time.Second),
				RetryAfter:   30 * time.Second,
			},
		},
		{
			// edubruell/tidyllm tests/testthat/groq/…/chat/completions-adc488-POST.R (2025-03-03).
			name: "groq capture",
			kv: []string{
				"x-groq-region", "me-central-1",
				"x-ratelimit-limit-requests", "1000",
				"x-ratelimit-limit-tokens", "6000",
				"x-ratelimit-remaining-requests", "999",
				"x-ratelimit-remaining-tokens", "5992",
				"x-ratelimit-reset-requests", "1m26.4s",
				"x-ratelimit-reset-tokens", "80ms",
			},
			want: Observation{
				Requests:     win(1000, 999, time.Minute+26400*time.Millisecond),
				Tokens:       win(6000, 5992, 80*time.Millisecond),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "groq documented fractional resets on a 429",
			kv: []string{
				"retry-after", "2",
				"x-ratelimit-limit-requests", "14400",
				"x-ratelimit-limit-tokens", "18000",
				"x-ratelimit-remaining-requests", "14370",
				"x-ratelimit-remaining-tokens", "0",
				"x-ratelimit-reset-requests", "2m59.56s",
				"x-ratelimit-reset-tokens", "7.66s",
			},
			want: Observation{
				Requests:     win(14400, 14370, 2*time.Minute+59560*time.Millisecond),
				Tokens:       win(18000, 0, 7660*time.Millisecond),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   2 * time.Second,
			},
		},
		{
			name: "lenient counts",
			kv: []string{
				"x-ratelimit-limit-requests", " 60 ",
				"x-ratelimit-remaining-requests", "\t59",
				"x-ratelimit-reset-requests", " 1s ",
			},
			want: Observation{
				Requests:     win(60, 59, time.Second),
				Tokens:       unknownBucket(),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "garbage counts are unknown",
			kv: []string{
				"x-ratelimit-limit-requests", "abc",
				"x-ratelimit-remaining-requests", "12.5",
				"x-ratelimit-reset-requests", "1s",
				"x-ratelimit-limit-tokens", "+150000",
				"x-ratelimit-remaining-tokens", "99999999999999999999",
				"x-ratelimit-reset-tokens", "soon",
			},
			want: Unknown(),
		},
		{
			name: "zero limit is unknown",
			kv: []string{
				"x-ratelimit-limit-tokens", "0",
				"x-ratelimit-remaining-tokens", "0",
				"x-ratelimit-reset-tokens", "garbage",
			},
			want: Observation{
				Requests:     unknownBucket(),
				Tokens:       win(-1, 0, -1),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// Together: requests and tokens a second, the reset in seconds.
			name: "together",
			kv: []string{
				"x-ratelimit-limit", "10",
				"x-ratelimit-remaining", "3",
				"x-ratelimit-reset", "0.4",
				"x-tokenlimit-limit", "20000",
				"x-tokenlimit-remaining", "1500",
			},
			want: Observation{
				Requests:     win(10, 3, 400*time.Millisecond),
				Tokens:       win(20000, 1500, -1),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// Together's own spelling never mixes into OpenAI's, which wins.
			name: "openai spelling beside together's",
			kv: []string{
				"x-ratelimit-limit-requests", "600",
				"x-ratelimit-remaining-requests", "599",
				"x-ratelimit-limit", "10",
				"x-ratelimit-remaining", "0",
			},
			want: Observation{
				Requests:     win(600, 599, -1),
				Tokens:       unknownBucket(),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// Fireworks: OpenAI's request headers, tokens a second by
			// direction, and served at lower priority when over its rate.
			name: "fireworks over its limit",
			kv: []string{
				"x-ratelimit-limit-requests", "6000",
				"x-ratelimit-remaining-requests", "5990",
				"x-ratelimit-limit-tokens-prompt", "100000",
				"x-ratelimit-remaining-tokens-prompt", "99000",
				"x-ratelimit-limit-tokens-generated", "10000",
				"x-ratelimit-remaining-tokens-generated", "0",
				"x-ratelimit-over-limit", " Yes ",
			},
			want: Observation{
				Requests:     win(6000, 5990, -1),
				Tokens:       unknownBucket(),
				InputTokens:  win(100000, 99000, -1),
				OutputTokens: win(10000, 0, -1),
				RetryAfter:   -1,
				OverLimit:    true,
			},
		},
		{
			name: "fireworks not over its limit",
			kv:   []string{"x-ratelimit-over-limit", "no"},
			want: Unknown(),
		},
		{
			// Mistral: tokens a minute, no request counts.
			name: "mistral",
			kv: []string{
				"x-ratelimitbysize-limit-minute", "500000",
				"x-ratelimitbysize-remaining-minute", "499000",
				"x-ratelimitbysize-limit-month", "1000000000",
				"x-ratelimitbysize-remaining-month", "999000000",
			},
			want: Observation{
				Requests:     unknownBucket(),
				Tokens:       win(500000, 499000, -1),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			// Groq: OpenAI's names, requests a day and tokens a minute,
			// fractional Go durations.
			name: "groq",
			kv: []string{
				"x-ratelimit-limit-requests", "14400",
				"x-ratelimit-remaining-requests", "14370",
				"x-ratelimit-reset-requests", "2m59.56s",
				"x-ratelimit-limit-tokens", "18000",
				"x-ratelimit-remaining-tokens", "17997",
				"x-ratelimit-reset-tokens", "7.66s",
			},
			want: Observation{
				Requests:     win(14400, 14370, 2*time.Minute+59560*time.Millisecond),
				Tokens:       win(18000, 17997, 7660*time.Millisecond),
				InputTokens:  unknownBucket(),
				OutputTokens: unknownBucket(),
				RetryAfter:   -1,
			},
		},
		{
			name: "no rate-limit headers",
			kv:   []string{"content-type", "application/json", "x-request-id", "req_1"},
			want: Unknown(),
		},
		{
			name: "no headers",
			want: Unknown(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = receipt
			}
			got := Parse(header(tt.kv...), now)
			if got != tt.want {
				t.Errorf("Parse =\n\t%+v\nwant\n\t%+v", got, tt.want)
			}
			checkObservation(t, got)
		})
	}
}

func TestParseNilHeader(t *testing.T) {
	if got := Parse(nil, receipt); got != Unknown() {
		t.Errorf("Parse(nil) = %+v, want Unknown()", got)
	}
}

// TestParseMinute: ParseMinute reads what Parse reads but the buckets
// that count a second (Together's, Fireworks' tokens), which it leaves
// unknown; OpenAI's names beside Together's still win.
func TestParseMinute(t *testing.T) {
	for _, tt := range []struct {
		name string
		kv   []string
		want Observation
	}{
		{"together alone", []string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "3", "x-tokenlimit-limit", "20000"}, Unknown()},
		{"openai beside together's", []string{"x-ratelimit-limit-requests", "600", "x-ratelimit-remaining-requests", "599", "x-ratelimit-limit", "10"},
			Observation{Requests: win(600, 599, -1), Tokens: unknownBucket(), InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1}},
		{"fireworks: its minute's requests, not its second's tokens", []string{"x-ratelimit-limit-requests", "6000", "x-ratelimit-remaining-requests", "5990",
			"x-ratelimit-limit-tokens-prompt", "100000", "x-ratelimit-remaining-tokens-prompt", "99000", "x-ratelimit-over-limit", "yes"},
			Observation{Requests: win(6000, 5990, -1), Tokens: unknownBucket(), InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1, OverLimit: true}},
		{"anthropic", []string{"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "29000"},
			Observation{Requests: win(50, 49, -1), Tokens: unknownBucket(), InputTokens: win(30000, 29000, -1), OutputTokens: unknownBucket(), RetryAfter: -1}},
		{"mistral's minute", []string{"x-ratelimitbysize-limit-minute", "500000", "x-ratelimitbysize-remaining-minute", "499000"},
			Observation{Requests: unknownBucket(), Tokens: win(500000, 499000, -1), InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseMinute(header(tt.kv...), receipt)
			if got != tt.want {
				t.Errorf("ParseMinute =\n\t%+v\nwant\n\t%+v", got, tt.want)
			}
			checkObservation(t, got)
		})
	}
	if got := ParseMinute(nil, receipt); got != Unknown() {
		t.Errorf("ParseMinute(nil) = %+v, want Unknown()", got)
	}
}

func TestParseFirstValueWins(t *testing.T) {
	h := http.Header{}
	h.Add("x-ratelimit-limit-requests", "60")
	h.Add("x-ratelimit-limit-requests", "1")
	h.Add("x-ratelimit-remaining-requests", "59")
	if got := Parse(h, receipt).Requests; got != win(60, 59, -1) {
		t.Errorf("Requests = %+v, want the first value of each header", got)
	}
}

func TestUnknown(t *testing.T) {
	o := Unknown()
	for name, w := range map[string]Bucket{
		"Requests": o.Requests, "Tokens": o.Tokens, "InputTokens": o.InputTokens, "OutputTokens": o.OutputTokens,
	} {
		if w != win(-1, -1, -1) || w.Known() {
			t.Errorf("%s = %+v, want every field -1", name, w)
		}
	}
	if o.RetryAfter != -1 {
		t.Errorf("RetryAfter = %v, want -1", o.RetryAfter)
	}
}

func TestWindowKnown(t *testing.T) {
	tests := []struct {
		name string
		w    Bucket
		want bool
	}{
		{"both counts", win(60, 59, -1), true},
		{"exhausted", win(60, 0, time.Second), true},
		{"unknown", unknownBucket(), false},
		{"zero value", Bucket{}, false},
		{"remaining only", win(-1, 45, -1), false},
		{"limit only", win(16000, -1, -1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.w.Known(); got != tt.want {
				t.Errorf("%+v.Known() = %v, want %v", tt.w, got, tt.want)
			}
		})
	}
}

// TestReadBucket: an event's counts and reset in seconds read by the
// headers' rules.
func TestReadBucket(t *testing.T) {
	tests := []struct {
		limit, remaining, reset string
		want                    Bucket
	}{
		{"600", "599", "0.1", Bucket{Limit: 600, Remaining: 599, Reset: 100 * time.Millisecond}},
		{"100000", "0", "31.5", Bucket{Limit: 100000, Remaining: 0, Reset: 31500 * time.Millisecond}},
		{"600", "", "", Bucket{Limit: 600, Remaining: -1, Reset: -1}},
		{"0", "5", "1e3", Bucket{Limit: -1, Remaining: 5, Reset: -1}},
		{"-1", "-1", "1", Bucket{Limit: -1, Remaining: -1, Reset: -1}},
		{"1.5", "2", "99999999", Bucket{Limit: -1, Remaining: 2, Reset: MaxDuration}},
	}
	for _, tt := range tests {
		if got := ReadBucket(tt.limit, tt.remaining, tt.reset); got != tt.want {
			t.Errorf("ReadBucket(%q, %q, %q) = %+v, want %+v", tt.limit, tt.remaining, tt.reset, got, tt.want)
		}
	}
}
