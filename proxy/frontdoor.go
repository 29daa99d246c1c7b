package proxy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/classify"
)

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
// it, and resolves its route. A non-nil refusal is the answer to give.
func inspect(r *http.Request) (route, *refusal) {
	anthropic := anthropicPath(r.URL.Path)
	switch {
	case !methodAllowed(r.Method):
		return route{anthropic: anthropic}, &refusal{status: http.StatusMethodNotAllowed, reason: reasonMethod,
			kind: "invalid_request_error", message: "meterproxy: method " + r.Method + " is not used by the provider's API",
			allow: allowedMethods}
	case isUpgrade(r):
		return route{anthropic: anthropic}, &refusal{status: http.StatusBadRequest, reason: reasonUpgrade,
			kind: "invalid_request_error", message: "meterproxy: protocol upgrades (WebSocket, h2c) are not forwarded: a tunnel could not be metered"}
	case classify.ConflictingCredentials(r.Header):
		return route{anthropic: anthropic}, &refusal{status: http.StatusBadRequest, reason: reasonConflictingCredentials,
			kind: "invalid_request_error", message: "meterproxy: the request carries more than one credential (Authorization, api-key, x-api-key) with different values"}
	}
	rt, err := routeOf(r.URL)
	if errors.Is(err, errNonCanonicalPath) {
		return route{anthropic: anthropic}, &refusal{status: http.StatusBadRequest, reason: reasonNonCanonicalPath,
			kind: "invalid_request_error", message: "meterproxy: the path is not canonical (dot segments, empty segments or encoded slashes)"}
	}
	return rt, nil
}
