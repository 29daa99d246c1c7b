package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// googleError is Google's error body (google.rpc.Status), the Gemini
// API's: its HTTP status, a message, the canonical code's name, and
// details, of which a refusal sends two: an ErrorInfo whose reason is
// the refusal's reason (domain meterproxy), and a RetryInfo when it has a
// retry hint.
type googleError struct {
	Error struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Status  string         `json:"status"`
		Details []googleDetail `json:"details"`
	} `json:"error"`
}

// googleDetail is one of a googleError's details.
type googleDetail struct {
	Type       string `json:"@type"`
	Reason     string `json:"reason,omitempty"`
	Domain     string `json:"domain,omitempty"`
	RetryDelay string `json:"retryDelay,omitempty"`
}

// googleBody is f as Google's error body.
func (f refusal) googleBody() googleError {
	var e googleError
	e.Error.Code, e.Error.Message, e.Error.Status = f.status, f.message, googleStatus(f.status)
	e.Error.Details = []googleDetail{{Type: "type.googleapis.com/google.rpc.ErrorInfo", Reason: f.reason, Domain: "meterproxy"}}
	if f.retryAfter > 0 {
		e.Error.Details = append(e.Error.Details, googleDetail{Type: "type.googleapis.com/google.rpc.RetryInfo",
			RetryDelay: protoSeconds(f.retryAfter)})
	}
	return e
}

// protoSeconds is d as a protobuf Duration's JSON form, whole seconds
// rounded up ("47s"), at least 1s.
func protoSeconds(d time.Duration) string {
	secs := max(int64((d+time.Second-1)/time.Second), 1)
	return strconv.FormatInt(secs, 10) + "s"
}

// googleStatus is the canonical code Google's APIs answer an HTTP status
// with (google.rpc.Code's HTTP mapping).
func googleStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	case http.StatusUpgradeRequired:
		return "FAILED_PRECONDITION"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return fmt.Sprintf("HTTP_%d", status)
}
