package ratelimit

import (
	"strings"
	"testing"
	"time"
)

// googleFreeTier429 is Gemini's 429 on a free tier's per-minute quota, as
// the API sends it (ai.google.dev/gemini-api/docs/rate-limits).
const googleFreeTier429 = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[` +
	`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests",` +
	`"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"15"}]},` +
	`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},` +
	`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47s"}]}}`

// googleNoQuota429 is Gemini's 429 for a model the tier has no quota for.
const googleNoQuota429 = `{"error":{"code":429,"message":"Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.5-pro","status":"RESOURCE_EXHAUSTED","details":[` +
	`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[` +
	`{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-pro"},"quotaValue":"5"},` +
	`{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerDay-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-pro"},"quotaValue":"0"}]},` +
	`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}]}}`

func TestParseGoogleError(t *testing.T) {
	tests := []struct {
		name string
		body string
		want GoogleLimit
		ok   bool
	}{
		{"free tier per minute", googleFreeTier429,
			GoogleLimit{RetryDelay: 47 * time.Second, Model: "gemini-2.0-flash", QuotaID: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}, true},
		{"openai-compatible wraps it in an array", "[" + googleFreeTier429 + "]",
			GoogleLimit{RetryDelay: 47 * time.Second, Model: "gemini-2.0-flash", QuotaID: "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}, true},
		{"limit 0 names the zero violation", googleNoQuota429,
			GoogleLimit{RetryDelay: 12 * time.Second, NoQuota: true, Model: "gemini-2.5-pro", QuotaID: "GenerateContentInputTokensPerModelPerDay-FreeTier"}, true},
		{"fractional delay", `{"error":{"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}`,
			GoogleLimit{RetryDelay: 1500 * time.Millisecond}, true},
		{"code alone", `{"error":{"code":429,"message":"x"}}`, GoogleLimit{}, true},
		{"status alone", `{"error":{"status":"RESOURCE_EXHAUSTED"}}`, GoogleLimit{}, true},
		{"huge delay capped", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"9999999999s"}]}}`,
			GoogleLimit{RetryDelay: MaxDuration}, true},
		{"delay without unit unknown", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47"}]}}`, GoogleLimit{}, true},
		{"negative delay unknown", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"-5s"}]}}`, GoogleLimit{}, true},
		{"delay as object unknown", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":{"seconds":47}}]}}`, GoogleLimit{}, true},
		{"quotaValue number is not zero's word", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaValue":0}]}]}}`, GoogleLimit{}, true},
		{"model name cleaned", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaValue":"0","quotaDimensions":{"model":"a b\"<c>"}}]}]}}`,
			GoogleLimit{NoQuota: true, Model: "a_b__c_"}, true},
		{"another error", `{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"x"}}`, GoogleLimit{}, false},
		{"openai shape", `{"error":{"message":"x","type":"rate_limit_error","code":"rate_limit_exceeded"}}`, GoogleLimit{}, false},
		{"not json", `Too Many Requests`, GoogleLimit{}, false},
		{"empty", ``, GoogleLimit{}, false},
		{"empty array", `[]`, GoogleLimit{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseGoogleError([]byte(tt.body))
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseGoogleError = (%+v, %v), want (%+v, %v)", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestParseGoogleErrorBounded: what lies past MaxGoogleError is not read,
// and a long list of details is walked only so far.
func TestParseGoogleErrorBounded(t *testing.T) {
	pad := `{"@type":"x","pad":"` + strings.Repeat("p", MaxGoogleError) + `"},`
	body := `{"error":{"code":429,"details":[` + pad + `{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47s"}]}}`
	if got, _ := ParseGoogleError([]byte(body)); got.RetryDelay != 0 {
		t.Errorf("a RetryInfo past MaxGoogleError: ParseGoogleError = %+v, want no delay", got)
	}
	many := `{"error":{"code":429,"details":[` + strings.Repeat(`{"@type":"x"},`, maxGoogleDetails) +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47s"}]}}`
	if got, ok := ParseGoogleError([]byte(many)); !ok || got.RetryDelay != 0 {
		t.Errorf("a RetryInfo past maxGoogleDetails details: ParseGoogleError = (%+v, %v), want no delay", got, ok)
	}
}

func FuzzParseGoogleError(f *testing.F) {
	for _, s := range []string{googleFreeTier429, googleNoQuota429, "[" + googleFreeTier429 + "]", `{"error":{"code":429}}`, `[`, `{"error":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		l, ok := ParseGoogleError(body)
		if !ok && l != (GoogleLimit{}) {
			t.Fatalf("ParseGoogleError = (%+v, false), want nothing with false", l)
		}
		if l.RetryDelay < 0 || l.RetryDelay > MaxDuration {
			t.Fatalf("RetryDelay %v outside [0, %v]", l.RetryDelay, MaxDuration)
		}
		for _, name := range []string{l.Model, l.QuotaID} {
			if len(name) > maxGoogleName || cleanName(name) != name {
				t.Fatalf("name %q is not kept clean and bounded", name)
			}
		}
	})
}
