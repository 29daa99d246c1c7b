package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRefusalGoogleShape: a refusal on a Gemini path is Google's error
// body: the HTTP status as its code, the canonical status, meterproxy's
// reason in an ErrorInfo, and the retry hint in a RetryInfo (whole
// seconds, rounded up) besides the headers.
func TestRefusalGoogleShape(t *testing.T) {
	for _, tt := range []struct {
		f          refusal
		status     string
		retryDelay string
	}{
		{refusal{status: http.StatusTooManyRequests, reason: reasonQueueFull, message: "m", retryAfter: 1500 * time.Millisecond}, "RESOURCE_EXHAUSTED", "2s"},
		{refusal{status: http.StatusTooManyRequests, reason: reasonNoQuotaForModel, message: "m"}, "RESOURCE_EXHAUSTED", ""},
		{refusal{status: http.StatusBadRequest, reason: reasonDuplicateKey, message: "m"}, "INVALID_ARGUMENT", ""},
		{refusal{status: http.StatusServiceUnavailable, reason: reasonShuttingDown, message: "m", retryAfter: time.Millisecond}, "UNAVAILABLE", "1s"},
		{refusal{status: http.StatusGatewayTimeout, reason: reasonTimeout, message: "m"}, "DEADLINE_EXCEEDED", ""},
		{refusal{status: http.StatusUnauthorized, reason: reasonUnknownCaller, message: "m"}, "UNAUTHENTICATED", ""},
		{refusal{status: http.StatusMethodNotAllowed, reason: reasonMethod, message: "m"}, "UNIMPLEMENTED", ""},
	} {
		w := httptest.NewRecorder()
		tt.f.write(w, shapeGoogle)
		e := googleErrorOf(t, w.Body.Bytes())
		var delay string
		for _, d := range e.Error.Details {
			if d.Type == "type.googleapis.com/google.rpc.RetryInfo" {
				delay = d.RetryDelay
			}
		}
		if w.Code != tt.f.status || e.Error.Code != tt.f.status || e.Error.Status != tt.status || e.reason() != tt.f.reason || delay != tt.retryDelay {
			t.Errorf("%s: %d %s, want %d %s with reason %s and retryDelay %q", tt.f.reason, w.Code, w.Body, tt.f.status, tt.status, tt.f.reason, tt.retryDelay)
		}
	}
}
