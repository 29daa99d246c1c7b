package proxy

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// refusal is an answer meterproxy gives itself instead of the upstream's.
type refusal struct {
	status int
	// reason is the metric label and the error code, e.g. "queue_full".
	reason string
	// kind is the provider's error type, e.g. "rate_limit_error".
	kind    string
	message string
	// retryAfter, when positive, becomes Retry-After and retry-after-ms.
	retryAfter time.Duration
	// retry is the x-should-retry header: whether an SDK should retry.
	retry bool
	// allow, when set, is the Allow header of a 405.
	allow string
}

// The refusal reasons, the closed label set of meterproxy_refusals_total.
const (
	reasonUnknownCaller = "unknown_caller"
	reasonBodyTooLarge  = "body_too_large"
	reasonBadRequest    = "bad_request"
	reasonQueueFull     = "queue_full"
	reasonMaxWait       = "max_wait_exceeded"
	// reasonCallerCap: the caller's own cap (callers[].max_in_flight,
	// requests_per_minute) left no room in time, or its queue is full.
	reasonCallerCap    = "caller_cap_exceeded"
	reasonShuttingDown = "shutting_down"
	// reasonPoolRemoved: a reload removed the pool the request waited in.
	reasonPoolRemoved = "pool_removed"
	// reasonStoreUnavailable: the store failed under store.on_error closed.
	reasonStoreUnavailable = "store_unavailable"
	reasonUnreachable      = "upstream_unreachable"
	reasonTimeout          = "upstream_timeout"
	// The front door: requests refused before anything reads them.
	reasonMethod                 = "method_not_allowed"
	reasonUpgrade                = "upgrade_not_supported"
	reasonNonCanonicalPath       = "non_canonical_path"
	reasonConflictingCredentials = "conflicting_credentials"
	// reasonBodyTimeout: the body did not arrive within
	// server.body_read_timeout.
	reasonBodyTimeout = "body_read_timeout"
	// reasonBodyMemory: the bodies in memory would exceed
	// server.max_body_memory_bytes.
	reasonBodyMemory = "body_memory_exhausted"
	// reasonDuplicateKey: the body repeats a key the proxy reads or the
	// provider charges by (usage.ErrDuplicateKey).
	reasonDuplicateKey = "duplicate_key"
	// reasonUnsupportedEncoding: a metered body in a Content-Encoding
	// (415).
	reasonUnsupportedEncoding = "unsupported_encoding"
	// reasonChargeTooLarge: the request would be charged more tokens than
	// one request may be (account.max_request_tokens, or a pool's).
	reasonChargeTooLarge = "charge_too_large"
)

var refusalReasons = []string{
	reasonUnknownCaller, reasonBodyTooLarge, reasonBadRequest, reasonQueueFull,
	reasonMaxWait, reasonCallerCap, reasonShuttingDown, reasonPoolRemoved, reasonStoreUnavailable, reasonUnreachable, reasonTimeout,
	reasonMethod, reasonUpgrade, reasonNonCanonicalPath, reasonConflictingCredentials, reasonBodyTimeout, reasonBodyMemory,
	reasonDuplicateKey, reasonUnsupportedEncoding, reasonChargeTooLarge,
}

// openAIError is OpenAI's (and Azure's) error body.
type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// write sends the refusal in the shape of the provider's API (Anthropic's
// when anthropic, else OpenAI's), with the retry headers the official SDKs
// read.
func (f refusal) write(w http.ResponseWriter, anthropic bool) {
	h := w.Header()
	if f.allow != "" {
		h.Set("Allow", f.allow)
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Should-Retry", strconv.FormatBool(f.retry))
	if f.retryAfter > 0 {
		secs := int64(math.Ceil(f.retryAfter.Seconds()))
		h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(max(f.retryAfter.Milliseconds(), 1), 10))
	}
	var body any
	if anthropic {
		var e anthropicError
		e.Type, e.Error.Type, e.Error.Message = "error", f.kind, f.message
		body = e
	} else {
		var e openAIError
		e.Error.Message, e.Error.Type, e.Error.Code = f.message, f.kind, f.reason
		body = e
	}
	w.WriteHeader(f.status)
	_ = json.NewEncoder(w).Encode(body) // the client may be gone; nothing to do
}
