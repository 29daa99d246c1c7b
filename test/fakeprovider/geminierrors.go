package fakeprovider

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Google's errors as the Gemini API sends them (google.rpc.Status): the
// HTTP status, a message, the canonical code's name and details. Its rate
// limit is a 429 RESOURCE_EXHAUSTED without any rate-limit or
// Retry-After header, its body saying which quota was hit (QuotaFailure)
// and when to come back (RetryInfo's retryDelay, whole seconds); a model
// the account's tier has no quota for (ModelLimits.NoQuota) is the same
// 429 with a quotaValue of "0" and "limit: 0" in the message. The
// OpenAI-compatible endpoint sends the same object in a JSON array.

// noQuotaRetry is the retryDelay of a NoQuota model's 429: Google sends
// one even then, and no wait brings a quota.
const noQuotaRetry = 30 * time.Second

type googleError struct {
	Error googleStatus `json:"error"`
}

type googleStatus struct {
	Code    int              `json:"code"`
	Message string           `json:"message"`
	Status  string           `json:"status"`
	Details []map[string]any `json:"details,omitempty"`
}

// googleCode is the canonical code's name Google answers status with.
func googleCode(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// failGoogle answers status with e, in a JSON array on the
// OpenAI-compatible endpoint.
func (x *exchange) failGoogle(e googleStatus) {
	if x.api == geminiOpenAI {
		x.writeJSON(e.Code, []googleError{{Error: e}})
		return
	}
	x.writeJSON(e.Code, googleError{Error: e})
}

// failGeminiLimit answers a request the rate limit refused (or, noQuota,
// one for a model the tier has no quota for) as Gemini does; retry is
// when a request would be admitted.
func (x *exchange) failGeminiLimit(model string, noQuota bool, retry time.Duration) {
	quotaID, metric, value := "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "generate_content_free_tier_requests", x.arr.requests.limit
	if x.arr.tokens.limit > 0 && x.arr.tokens.retry > x.arr.requests.retry {
		quotaID, metric, value = "GenerateContentInputTokensPerModelPerMinute-FreeTier", "generate_content_free_tier_input_token_count", x.arr.tokens.limit
	}
	if noQuota {
		quotaID, metric, value, retry = "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "generate_content_free_tier_requests", 0, noQuotaRetry
	}
	secs := max(int64(math.Ceil(retry.Seconds())), 1)
	msg := fmt.Sprintf("You exceeded your current quota, please check your plan and billing details. "+
		"Quota exceeded for metric: generativelanguage.googleapis.com/%s, limit: %d, model: %s. Please retry in %ds.", metric, value, model, secs)
	x.failGoogle(googleStatus{Code: http.StatusTooManyRequests, Message: msg, Status: "RESOURCE_EXHAUSTED", Details: []map[string]any{
		{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []map[string]any{{
			"quotaMetric": "generativelanguage.googleapis.com/" + metric, "quotaId": quotaID,
			"quotaDimensions": map[string]string{"location": "global", "model": model}, "quotaValue": strconv.Itoa(value)}}},
		{"@type": "type.googleapis.com/google.rpc.Help", "links": []map[string]string{{
			"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}}},
		{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.FormatInt(secs, 10) + "s"},
	}})
}
