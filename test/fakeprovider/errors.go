package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// openAIErrorKind returns the error type and code OpenAI uses for status.
func openAIErrorKind(status int) (string, *string) {
	code := func(s string) *string { return &s }
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error", code("rate_limit_exceeded")
	case status == http.StatusUnauthorized:
		return "invalid_request_error", code("invalid_api_key")
	case status == http.StatusServiceUnavailable:
		return "server_error", code("server_is_overloaded")
	case status >= 500:
		return "server_error", nil
	default:
		return "invalid_request_error", nil
	}
}

// anthropicErrorType returns the error type Anthropic uses for status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// fail answers status with msg in the error shape of the path's provider.
func (x *exchange) fail(status int, msg string) {
	if x.api.google() {
		x.failGoogle(googleStatus{Code: status, Message: msg, Status: googleCode(status)})
		return
	}
	if x.api == anthropic {
		x.writeJSON(status, anthropicError{
			Type:  "error",
			Error: anthropicErrorDetail{Type: anthropicErrorType(status), Message: msg},
		})
		return
	}
	typ, code := openAIErrorKind(status)
	x.writeJSON(status, openAIError{Error: openAIErrorDetail{Message: msg, Type: typ, Code: code}})
}

// failJSON answers a body that is not a JSON object.
func (x *exchange) failJSON(err error) {
	x.fail(http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error())
}

// injectFault answers the status X-Fake-Status asked for.
func (x *exchange) injectFault() {
	if x.api.google() && x.faults.status == http.StatusTooManyRequests {
		x.failGeminiLimit(x.arr.model, false, x.faults.retryAfter) // Gemini's word on when is in its body
		return
	}
	if x.faults.hasRetryAfter {
		setRetryAfter(x.w.Header(), x.faults.retryAfter)
	}
	x.fail(x.faults.status, "Injected fault: status "+strconv.Itoa(x.faults.status))
}

// writeJSON answers status with v as JSON and a Content-Length.
func (x *exchange) writeJSON(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are marshalled; they always encode
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"fakeprovider: encode failed","type":"server_error","param":null,"code":null}}`)
	}
	if x.sink != nil {
		x.status = status
		x.sendErrorEvent(status, b)
		return
	}
	b = append(b, '\n')
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	x.status = status
	x.w.WriteHeader(status)
	_, _ = x.w.Write(b) // a client gone away is not the provider's problem
}
