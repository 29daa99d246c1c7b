package proxy

import (
	"net/http"
)

// Negotiations are the front door's answers that are protocol
// negotiation, not refusals of a request of a class: the client asked
// nothing of an API. A WebSocket client tries its socket first and falls
// back to HTTP on a 426 (Codex, on every start); Claude Code sends HEAD
// /api/hello without a key on every start, only to see the proxy answers.
// Counted as refusals, each start of either fired the class alerts
// (InteractiveRefused). They are counted in meterproxy_negotiations_total
// by reason, and in neither meterproxy_requests_total nor
// meterproxy_refusals_total (records.count).
const (
	// negotiationUpgrade: an upgrade (a WebSocket, h2c) meterproxy does
	// not meter, answered 426 (upgradeRequired).
	negotiationUpgrade = "upgrade_required"
	// negotiationNotAPI: a HEAD or GET without a configured key on a path
	// no provider API has, answered 404 (notAnAPI).
	negotiationNotAPI = "not_an_api"
)

// negotiationCodes is every negotiation with its status: the closed
// label set of meterproxy_negotiations_total, and docs/refusals.md's
// table of negotiations.
var negotiationCodes = []reasonStatus{
	{negotiationUpgrade, http.StatusUpgradeRequired},
	{negotiationNotAPI, http.StatusNotFound},
}

// upgradeRequired is the answer to an upgrade meterproxy does not meter
// (inspect): 426 Upgrade Required, on which a client goes on over plain
// HTTP at once — Codex falls back from its Responses WebSocket to HTTP,
// where a 400 ended its run and a 404, 405 or 501 cost it five retries.
// The tunnel is never opened: it would carry traffic no window admits and
// no meter counts. No Upgrade header names a protocol to switch to: the
// one the proxy wants is the one the request came in on.
func upgradeRequired() refusal {
	return refusal{status: http.StatusUpgradeRequired, reason: negotiationUpgrade, kind: "invalid_request_error", negotiation: true,
		message: "meterproxy: this protocol upgrade (WebSocket, h2c) is not metered here; send the request over plain HTTP"}
}

// notAnAPI is the answer to a probe (isProbe) from a caller without a
// configured key under unknown_callers: reject: 404 in the error shape of
// OpenAI, never forwarded, and no key asked for. A client that probes
// only checks the proxy answers.
func notAnAPI() refusal {
	return refusal{status: http.StatusNotFound, reason: negotiationNotAPI, kind: "invalid_request_error", negotiation: true,
		message: "meterproxy: no provider API at this path (the APIs are under /v1 and /openai)"}
}

// isProbe reports whether r is a HEAD or GET on a path no provider API
// has (isAPIPath): a reachability probe, such as Claude Code's HEAD
// /api/hello.
func isProbe(r *http.Request) bool {
	return (r.Method == http.MethodHead || r.Method == http.MethodGet) && !isAPIPath(r.URL.Path)
}

// isAPIPath reports whether path lies under a root of the providers' APIs:
// /v1 (OpenAI, Anthropic and the OpenAI-compatible servers) or /openai
// (Azure). Every row of pathTable does, and so does every API path no
// row names (/v1/models, /v1/images/generations, …).
func isAPIPath(path string) bool {
	return under(path, "/v1") || under(path, "/openai")
}
