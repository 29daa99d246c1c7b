package proxy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/classify"
)

// frontDoor is the part of the handler that screens a request before
// anything reads it (screen), an HTTP request's and a WebSocket
// handshake's alike.
type frontDoor struct {
	// maxUnknownStreams is server.max_unknown_caller_streams
	// (enterUnknown).
	maxUnknownStreams int
}

// allowedMethods are the methods the providers' APIs use. Anything else
// (CONNECT, TRACE, …) is answered 405 and never forwarded.
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

func methodAllowed(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// isUpgrade reports whether r asks to switch protocols (WebSocket, h2c):
// a tunnel would carry traffic that no window admits and no meter counts.
func isUpgrade(r *http.Request) bool {
	if r.Header.Get("Upgrade") != "" {
		return true
	}
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// inspect checks what must hold of a request before anything else reads
// it, and resolves its route. A non-nil refusal is the answer to give. An
// upgrade gets upgradeRequired: a relay that meters one (a WebSocket of an
// API meterproxy meters turn by turn) is a case before it.
func inspect(r *http.Request) (route, *refusal) {
	// A refused request has no route; its answer takes the shape of the
	// provider its path names.
	refuse := func(status int, reason, message string) (route, *refusal) {
		f := &refusal{status: status, reason: reason, kind: "invalid_request_error", message: message}
		if status == http.StatusMethodNotAllowed {
			f.allow = allowedMethods
		}
		return route{family: familyOf(r.URL.Path)}, f
	}
	switch {
	case !methodAllowed(r.Method):
		return refuse(http.StatusMethodNotAllowed, reasonMethod, "meterproxy: method "+r.Method+" is not used by the provider's API")
	case isUpgrade(r):
		f := upgradeRequired()
		return route{family: familyOf(r.URL.Path)}, &f
	case classify.ConflictingCredentials(r.Header):
		return refuse(http.StatusBadRequest, reasonConflictingCredentials,
			"meterproxy: the request carries more than one credential (Authorization, api-key, x-api-key, x-goog-api-key or a Gemini ?key=) with different values")
	}
	rt, err := routeOf(r.URL)
	rt.generates = writes(r.Method) && !rt.free
	switch {
	case errors.Is(err, errBadDeployment):
		return refuse(http.StatusBadRequest, reasonNonCanonicalPath,
			"meterproxy: the Azure deployment name in the path must be letters, digits, '-', '_' and '.', not ending in '.', without percent-encoding or ';' parameters")
	case errors.Is(err, errBadModel):
		return refuse(http.StatusBadRequest, reasonNonCanonicalPath,
			"meterproxy: the Gemini model name in the path must be letters, digits, '-', '_' and '.', not ending in '.', without percent-encoding")
	case errors.Is(err, errNonCanonicalPath):
		return refuse(http.StatusBadRequest, reasonNonCanonicalPath, "meterproxy: the path is not canonical (dot segments, empty segments, encoded slashes or ';' parameters)")
	}
	return rt, nil
}

// screen answers a request refused before anything reads it — bad, the
// front door's refusal (inspect); an unknown caller under unknown_callers:
// reject (err, Classify's), with a negotiation (notAnAPI) when it only
// probes a path no API has; an unknown caller's request past its HTTP/2
// connection's bound (enterUnknown) — and reports whether it goes on.
// leave gives its place on its connection back; it must run when
// ServeHTTP ends.
func (d frontDoor) screen(w http.ResponseWriter, r *http.Request, ex *exchange, bad *refusal, err error) (leave func(), ok bool) {
	switch {
	case bad != nil:
		closeUnread(w, r)
		ex.refuse(*bad)
		return func() {}, false
	case errors.Is(err, classify.ErrUnknownCaller) && isProbe(r):
		closeUnread(w, r)
		ex.refuse(notAnAPI())
		return func() {}, false
	case errors.Is(err, classify.ErrUnknownCaller):
		closeUnread(w, r)
		ex.refuse(refusal{status: http.StatusUnauthorized, reason: reasonUnknownCaller,
			kind: "authentication_error", message: "meterproxy: the API key is not one of the configured callers"})
		return func() {}, false
	case !ex.res.Known:
		leave, ok := enterUnknown(r, d.maxUnknownStreams)
		if !ok {
			closeUnread(w, r)
			ex.refuse(tooManyStreams(d.maxUnknownStreams))
		}
		return leave, ok
	}
	return func() {}, true
}
