package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
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
	// negotiation says the answer is protocol negotiation, not a refusal
	// of a request of a class (negotiation.go): reason is one of
	// negotiationCodes, and it is counted in
	// meterproxy_negotiations_total only.
	negotiation bool
}

// The refusal reasons: the error body's code, the reason label of
// meterproxy_refusals_total. Each one's comment is its meaning in
// docs/refusals.md (make docs).
const (
	// reasonUnknownCaller: no configured caller has the request's key and
	// classify.unknown_callers is reject.
	reasonUnknownCaller = "unknown_caller"
	// reasonBodyTooLarge: the body is larger than server.max_body_bytes
	// (server.max_upload_bytes for a batch or an upload).
	reasonBodyTooLarge = "body_too_large"
	// reasonBadRequest: a body or a WebSocket message meterproxy must read
	// and cannot (unreadable, not JSON, a field of the wrong type), or a
	// malformed WebSocket handshake.
	reasonBadRequest = "bad_request"
	// reasonQueueFull: the class's queue holds classes.<class>.max_queue
	// requests already.
	reasonQueueFull = "queue_full"
	// reasonMaxWait: no capacity for the request's class within
	// classes.<class>.max_wait (or what is left of its budget stayed held
	// by requests in flight that long).
	reasonMaxWait = "max_wait_exceeded"
	// reasonCallerCap: the caller's own cap (callers[].max_in_flight,
	// requests_per_minute) left no room in time, or its queue is full.
	reasonCallerCap = "caller_cap_exceeded"
	// reasonShuttingDown: the proxy is shutting down.
	reasonShuttingDown = "shutting_down"
	// reasonPoolRemoved: a reload removed the pool the request waited in.
	reasonPoolRemoved = "pool_removed"
	// reasonStoreUnavailable: the store failed under store.on_error
	// closed, or for a request with a spend budget (budgets fail closed).
	reasonStoreUnavailable = "store_unavailable"
	// reasonUnreachable: the upstream exchange failed before any answer,
	// other than by a timeout: the upstream could not be reached.
	reasonUnreachable = "upstream_unreachable"
	// reasonTimeout: the upstream exchange timed out before any answer
	// (its headers did not come within upstream.response_header_timeout).
	reasonTimeout = "upstream_timeout"
	// reasonMethod: a method the provider's API does not use (front door:
	// refused before anything reads the request).
	reasonMethod = "method_not_allowed"
	// reasonNonCanonicalPath: a path that is not canonical (dot or empty
	// segments, encoded slashes, ';' parameters, a malformed Azure
	// deployment name), which the proxy and the provider could read
	// differently (front door).
	reasonNonCanonicalPath = "non_canonical_path"
	// reasonConflictingCredentials: more than one credential header
	// (Authorization, api-key, x-api-key, x-goog-api-key, or a Gemini
	// path's ?key=) with different values (front door).
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
	// reasonUnsupportedEncoding: a metered body in a Content-Encoding.
	reasonUnsupportedEncoding = "unsupported_encoding"
	// reasonChargeTooLarge: the request would be charged more tokens than
	// one request may be (account.max_request_tokens, or a pool's).
	reasonChargeTooLarge = "charge_too_large"
	// reasonBudgetExceeded: a spend budget (callers[].budget,
	// classes.<class>.budget) has no room for the request this period.
	reasonBudgetExceeded = "budget_exceeded"
	// reasonUnpricedModel: a spend budget cannot price the request's
	// model (no prices entry matches) and refuses unpriced requests.
	reasonUnpricedModel = "unpriced_model"
	// reasonUnmeteredAPI: a spend budget refuses requests that may cost
	// money on an API whose answers meterproxy cannot price
	// (budget.unpriced_apis).
	reasonUnmeteredAPI = "unmetered_api"
	// reasonTooManyStreams: an unknown caller's request past
	// server.max_unknown_caller_streams on one HTTP/2 connection.
	reasonTooManyStreams = "too_many_streams"
	// reasonTooManySockets: a WebSocket handshake past
	// server.max_sockets_per_caller.
	reasonTooManySockets = "too_many_sockets"
	// reasonTooManySessions: a Realtime handshake past
	// classes.<class>.max_sessions or callers[].max_sessions.
	reasonTooManySessions = "too_many_sessions"
	// reasonNoAccount: no account of upstream.accounts serves the API the
	// request's path belongs to (accounts of several providers serve
	// their own provider's paths alone), or none of those serves or
	// lends to the request's class. It is never sent to another
	// provider.
	reasonNoAccount = "no_account"
)

// reasonStatus is a reason and the HTTP status it is answered with.
type reasonStatus struct {
	reason string
	status int
}

// refusalCodes is every refusal reason with its status, the one list of
// them: the closed label set of meterproxy_refusals_total, and
// docs/refusals.md's table. TestDocsRefusals checks it against every
// refusal the code builds.
var refusalCodes = []reasonStatus{
	{reasonUnknownCaller, http.StatusUnauthorized},
	{reasonBodyTooLarge, http.StatusRequestEntityTooLarge},
	{reasonBadRequest, http.StatusBadRequest},
	{reasonQueueFull, http.StatusTooManyRequests},
	{reasonMaxWait, http.StatusTooManyRequests},
	{reasonCallerCap, http.StatusTooManyRequests},
	{reasonShuttingDown, http.StatusServiceUnavailable},
	{reasonPoolRemoved, http.StatusServiceUnavailable},
	{reasonStoreUnavailable, http.StatusServiceUnavailable},
	{reasonUnreachable, http.StatusBadGateway},
	{reasonTimeout, http.StatusGatewayTimeout},
	{reasonMethod, http.StatusMethodNotAllowed},
	{reasonNonCanonicalPath, http.StatusBadRequest},
	{reasonConflictingCredentials, http.StatusBadRequest},
	{reasonBodyTimeout, http.StatusRequestTimeout},
	{reasonBodyMemory, http.StatusServiceUnavailable},
	{reasonDuplicateKey, http.StatusBadRequest},
	{reasonUnsupportedEncoding, http.StatusUnsupportedMediaType},
	{reasonChargeTooLarge, http.StatusBadRequest},
	{reasonBudgetExceeded, http.StatusTooManyRequests},
	{reasonUnpricedModel, http.StatusBadRequest},
	{reasonUnmeteredAPI, http.StatusBadRequest},
	{reasonBatchUnmetered, http.StatusBadRequest},
	{reasonTooManyStreams, http.StatusTooManyRequests},
	{reasonTooManySockets, http.StatusTooManyRequests},
	{reasonTooManySessions, http.StatusTooManyRequests},
	{reasonNoAccount, http.StatusNotFound},
	{reasonNoQuotaForModel, http.StatusTooManyRequests},
}

// noAccount refuses a request no account may serve (reasonNoAccount),
// saying why in message.
func noAccount(message string) refusal {
	return refusal{status: http.StatusNotFound, reason: reasonNoAccount, kind: "invalid_request_error", message: message}
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

// write sends the refusal in the error shape of the request's API, with
// the retry headers the official SDKs read.
func (f refusal) write(w http.ResponseWriter, shape errorShape) {
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
	switch shape {
	case shapeAnthropic:
		var e anthropicError
		e.Type, e.Error.Type, e.Error.Message = "error", f.kind, f.message
		body = e
	case shapeGoogle:
		body = f.googleBody()
	default:
		var e openAIError
		e.Error.Message, e.Error.Type, e.Error.Code = f.message, f.kind, f.reason
		body = e
	}
	w.WriteHeader(f.status)
	_ = json.NewEncoder(w).Encode(body) // the client may be gone; nothing to do
}

// reasonOf is the refusal that answers a request of class whose admission
// failed with err (quota.Admitter.Admit) — api is its method and path, as
// a refusal of its API names it — and whether err is a decision
// about the request itself: its charge is more than one request may be
// (400 charge_too_large), its class's queue is full or max_wait passed
// (429 queue_full, max_wait_exceeded), or its caller's own cap left no
// room (429 caller_cap_exceeded). Any other error decided nothing about
// the request: the store failed under on_error closed, a reload removed
// its pool, the proxy is shutting down (503 store_unavailable,
// pool_removed, shutting_down) — or its context ended, which the caller
// tells apart (the client left; no answer).
func reasonOf(err error, class classify.Class, api apiName) (f refusal, decided bool) {
	if e, ok := errors.AsType[*quota.ChargeTooLargeError](err); ok {
		return refusal{status: http.StatusBadRequest, reason: reasonChargeTooLarge, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: this request would be charged %d tokens, more than the %d one request may be charged in pool %s (%s)",
				e.Tokens, e.Limit, e.Pool, e.Key)}, true
	}
	if e, ok := errors.AsType[*gate.BudgetExceededError](err); ok {
		// Not retried: the SDKs would retry a 429 for minutes, and the
		// budget comes back only when its period resets.
		return refusal{status: http.StatusTooManyRequests, reason: reasonBudgetExceeded, kind: "insufficient_quota",
			message: fmt.Sprintf("meterproxy: budget %s is spent: %s of %s this period, and this request may cost up to %s; it resets at %s",
				e.Budget, e.Spent, e.Limit, e.Cost, e.Resets.UTC().Format(time.RFC3339))}, true
	}
	if e, ok := errors.AsType[*gate.UnpricedModelError](err); ok {
		f := refusal{status: http.StatusBadRequest, reason: reasonUnpricedModel, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: budget %s cannot price model %q: no prices entry matches it", e.Budget, e.Model)}
		if e.Model == "" {
			f.message = fmt.Sprintf("meterproxy: budget %s cannot price this request: it names no model (a stored prompt's model is not known here); name the model", e.Budget)
		}
		return f, true
	}
	if e, ok := errors.AsType[*gate.UnmeteredAPIError](err); ok {
		return refusal{status: http.StatusBadRequest, reason: reasonUnmeteredAPI, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: budget %s cannot price %s: meterproxy reads no usage from this API's answers. "+
				"budget.unpriced_apis: worst_case on the budget (%s) lets such requests through, each charged its worst case",
				e.Budget, bounded(api.String(), maxNamedPath), budgetKeyOf(e.Budget, "unpriced_apis"))}, true
	}
	c := class.String()
	if errors.Is(err, quota.ErrNoAccount) {
		return noAccount("meterproxy: no account that serves this request's API (" + bounded(api.String(), maxNamedPath) + ") serves or lends to the " + c + " class"), true
	}
	if e, ok := errors.AsType[*gate.RefusedError](err); ok {
		f := refusal{status: http.StatusTooManyRequests, reason: reasonQueueFull, kind: "rate_limit_error",
			message: "meterproxy: the " + c + " queue is full", retryAfter: e.RetryAfter, retry: true}
		switch {
		case e.Caller != "" && errors.Is(err, gate.ErrQueueFull):
			f.reason, f.message = reasonCallerCap, "meterproxy: too many of this caller's requests already wait for its own cap"
		case e.Caller != "":
			f.reason, f.message = reasonCallerCap, "meterproxy: this caller's own cap (callers[].max_in_flight, requests_per_minute) left no room within the "+c+" class's max_wait"
		case errors.Is(err, gate.ErrBudgetHeld):
			f.reason, f.message = reasonMaxWait, "meterproxy: what is left of this request's budget is held by requests in flight, and none settled within the "+c+" class's max_wait"
		case errors.Is(err, gate.ErrWaitTimeout):
			f.reason, f.message = reasonMaxWait, "meterproxy: no "+c+" capacity within the class's max_wait"
		}
		return f, true
	}
	f = refusal{status: http.StatusServiceUnavailable, reason: reasonShuttingDown,
		kind: "api_error", message: "meterproxy: shutting down", retryAfter: time.Second, retry: true}
	switch {
	case errors.Is(err, store.ErrStoreUnavailable):
		f.reason, f.message = reasonStoreUnavailable, "meterproxy: the quota store is unavailable (under store.on_error closed, or for a request with a spend budget, which is never let past without it)"
	case errors.Is(err, quota.ErrPoolRemoved):
		f.reason, f.message = reasonPoolRemoved, "meterproxy: a configuration reload removed the pool this request waited in; retry it"
	}
	return f, false
}

// maxNamedPath bounds the path a refusal repeats back.
const maxNamedPath = 256

// bounded is s cut to at most n bytes, marked as cut ("…").
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// budgetKeyOf names key of the budget quota names budget ("caller:<name>"
// or "class:<class>") as the configuration spells it:
// classes.<class>.budget.<key>, or callers[].budget.<key> of the caller.
func budgetKeyOf(budget, key string) string {
	if class, ok := strings.CutPrefix(budget, "class:"); ok {
		return "classes." + class + ".budget." + key
	}
	return "callers[].budget." + key + " of caller " + strings.TrimPrefix(budget, "caller:")
}

// apiName names what a request asked of its API, for a refusal: its
// method and path, or a turn's event and API, joined by a space when
// named (String), not on every request.
type apiName struct{ verb, object string }

// String is the name: verb, and a space and object when there is one.
func (a apiName) String() string {
	if a.object == "" {
		return a.verb
	}
	return a.verb + " " + a.object
}
