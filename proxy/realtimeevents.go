package proxy

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/tidwall/gjson"
)

// What the proxy reads of the Realtime API's events: of a client event,
// whether it is a response.create, its event_id and its output cap; of an
// upstream event, its type, the response it is about, and of an error
// the client event it answers; of session.created and session.updated,
// the model serving the session (sessionModelPath); of
// rate_limits.updated, the provider's buckets.

// The Realtime event types the meter reads.
const (
	realtimeCreate      = "response.create"
	realtimeUpdate      = "session.update"
	realtimeCreated     = "response.created"
	realtimeDone        = "response.done"
	realtimeError       = "error"
	realtimeRateLimits  = "rate_limits.updated"
	realtimeSession     = "session.created"
	realtimeSessionSet  = "session.updated"
	realtimeEventIDName = "event_id"
)

// sessionModelPath is where session.created and session.updated name the
// model serving the session: the first session member's model.
const sessionModelPath = "session.model"

// realtimeClient is what the proxy reads of a Realtime client event.
type realtimeClient struct {
	// create says it is a response.create; eventID is its event_id (""
	// when it has none) and idAt where a missing one goes in (just past
	// the object's "{").
	create  bool
	eventID string
	idAt    int
	// maxOutput is its response's max_output_tokens (or the beta's
	// max_response_output_tokens), rounded up; 0 for none or "inf".
	maxOutput int64
	// model is the model a session.update's session names, and
	// namesModel whether it names one.
	model      string
	namesModel bool
}

// Why a Realtime client event cannot be read.
var (
	errRealtimeEventID = errors.New(`a client event's "event_id" must be a string, not empty, spelt so`)
	errRealtimeCap     = errors.New(`a response's "max_output_tokens" must be a number or "inf"`)
	errRealtimeResp    = errors.New(`a response.create's "response" must be an object`)
	errRealtimeModel   = errors.New(`a session.update's "session" must be an object, its "model" a string`)
)

// readRealtimeClient reads a Realtime client event: its type and
// event_id at its top level, keys matched as the widest reading any
// provider makes does (case folded, unescaped), and of a response.create
// its response's output cap. It walks the top level (and the response's)
// only, without parsing what is nested deeper. It refuses what the
// provider could read otherwise than the proxy: anything but an object, a
// key it reads repeated, a type not a string, an event_id not a string,
// empty, or spelt otherwise than "event_id" (an error answering the
// event names it by that), a cap neither a number nor "inf", a
// session.update's model not a string.
func readRealtimeClient(data []byte) (realtimeClient, error) {
	var ev realtimeClient
	if !isObject(data) {
		return ev, errNotObject
	}
	ev.idAt = bytes.IndexByte(data, '{') + 1
	var seenType, seenID, seenResp, seenSession, update bool
	var resp, session gjson.Result
	var err error
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch {
		case strings.EqualFold(k.Str, "type"):
			err = envelopeType(seenType, v)
			seenType, ev.create, update = true, strings.EqualFold(v.Str, realtimeCreate), strings.EqualFold(v.Str, realtimeUpdate)
		case strings.EqualFold(k.Str, realtimeEventIDName):
			switch {
			case seenID:
				err = errEnvelopeTwice
			case k.Str != realtimeEventIDName || v.Type != gjson.String || v.Str == "":
				err = errRealtimeEventID
			}
			seenID, ev.eventID = true, strings.Clone(v.Str)
		case strings.EqualFold(k.Str, "response"):
			if seenResp {
				err = errEnvelopeTwice
			}
			seenResp, resp = true, v
		case strings.EqualFold(k.Str, "session"):
			if seenSession {
				err = errEnvelopeTwice
			}
			seenSession, session = true, v
		}
		return err == nil
	})
	if err == nil && update && session.Exists() {
		ev.model, ev.namesModel, err = readSessionModel(session)
	}
	if err != nil || !ev.create || !resp.Exists() || resp.Type == gjson.Null {
		return ev, err
	}
	if !resp.IsObject() {
		return ev, errRealtimeResp
	}
	ev.maxOutput, err = readRealtimeCap(resp)
	return ev, err
}

// readSessionModel reads the model a session.update's session names:
// its model member (once), a string.
func readSessionModel(session gjson.Result) (model string, named bool, err error) {
	if !session.IsObject() {
		return "", false, errRealtimeModel
	}
	session.ForEach(func(k, v gjson.Result) bool {
		if !strings.EqualFold(k.Str, "model") {
			return true
		}
		switch {
		case named:
			err = errEnvelopeTwice
		case v.Type != gjson.String:
			err = errRealtimeModel
		}
		model, named = strings.Clone(v.Str), true
		return err == nil
	})
	return model, named, err
}

// readRealtimeCap reads a response.create's response's output cap:
// max_output_tokens, or the beta's max_response_output_tokens (one of
// them, once), a number of tokens or "inf" (no cap: 0).
func readRealtimeCap(resp gjson.Result) (int64, error) {
	var n int64
	var seen bool
	var err error
	resp.ForEach(func(k, v gjson.Result) bool {
		if !strings.EqualFold(k.Str, "max_output_tokens") && !strings.EqualFold(k.Str, "max_response_output_tokens") {
			return true
		}
		switch {
		case seen:
			err = errEnvelopeTwice
		case v.Type == gjson.Number:
			f := math.Ceil(v.Float())
			n = int64(min(max(f, 0), float64(usage.MaxTokens)))
		case v.Type == gjson.Null, v.Type == gjson.String && v.Str == "inf":
		default:
			err = errRealtimeCap
		}
		seen = true
		return err == nil
	})
	return n, err
}

// withEventID is data, a client event read by readRealtimeClient without
// an event_id, with id as its event_id: an error answering it names it,
// so the proxy can tell which request the provider refused.
func withEventID(data []byte, at int, id string) []byte {
	member := `"` + realtimeEventIDName + `":"` + id + `",`
	out := make([]byte, 0, len(data)+len(member))
	out = append(out, data[:at]...)
	out = append(out, member...)
	return append(out, data[at:]...)
}

// realtimeServer is what the proxy reads of a Realtime upstream event:
// its type, the response it is about (response.id on response.created
// and response.done, response_id on the rest), and of an error the
// client event it answers, its type and code.
type realtimeServer struct {
	typ, response       string
	answers             string
	errorType, errorKey string
}

// readRealtimeServer reads an upstream event's members at its top level
// (the first of each) and one level into its response and error objects.
func readRealtimeServer(data []byte) realtimeServer {
	var e realtimeServer
	var seenType, seenResp bool
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			if !seenType {
				e.typ, seenType = strings.Clone(v.Str), true
			}
		case "response_id":
			if !seenResp && v.Type == gjson.String {
				e.response, seenResp = strings.Clone(v.Str), true
			}
		case "response":
			if id := v.Get("id"); !seenResp && v.IsObject() && id.Type == gjson.String {
				e.response, seenResp = strings.Clone(id.Str), true
			}
		case "error":
			if v.IsObject() {
				e.answers = strings.Clone(v.Get(realtimeEventIDName).Str)
				e.errorType, e.errorKey = strings.Clone(v.Get("type").Str), strings.Clone(v.Get("code").Str)
			}
		}
		return true
	})
	return e
}

// status is the HTTP status an error event stands for, as the provider
// would have answered the request over HTTP: 429 for a rate limit or
// spent quota, 401 and 403 for credentials, 5xx for the provider's own
// failure, else 400.
func (e realtimeServer) status() int {
	switch {
	case e.errorType == "rate_limit_error" || e.errorKey == "rate_limit_exceeded" || e.errorType == "insufficient_quota":
		return http.StatusTooManyRequests
	case e.errorType == "authentication_error":
		return http.StatusUnauthorized
	case e.errorType == "permission_error":
		return http.StatusForbidden
	case e.errorType == "server_error" || e.errorType == "api_error":
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// maxRateLimits bounds the entries read from rate_limits.updated.
const maxRateLimits = 16

// readRateLimits reads a rate_limits.updated event's buckets — its
// requests and tokens entries, the first of each, by the rules the
// x-ratelimit-* headers are read by (ratelimit.ReadBucket) — and whether
// it named either.
func readRateLimits(data []byte) (ratelimit.Observation, bool) {
	obs := ratelimit.Unknown()
	var requests, tokens bool
	n := 0
	gjson.GetBytes(data, "rate_limits").ForEach(func(_, e gjson.Result) bool {
		num := func(key string) string {
			if v := e.Get(key); v.Type == gjson.Number {
				return v.Raw
			}
			return ""
		}
		b := func() ratelimit.Bucket {
			return ratelimit.ReadBucket(num("limit"), num("remaining"), num("reset_seconds"))
		}
		switch name := e.Get("name").Str; {
		case name == "requests" && !requests:
			obs.Requests, requests = b(), true
		case name == "tokens" && !tokens:
			obs.Tokens, tokens = b(), true
		}
		n++
		return n < maxRateLimits
	})
	return obs, requests || tokens
}
