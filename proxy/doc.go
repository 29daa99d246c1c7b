// Package proxy is the HTTP side of meterproxy: the chi router, the
// forwarding handler built on httputil.ReverseProxy, the shared upstream
// transport, provider-shaped error answers, the admin endpoints and the
// Prometheus metrics.
//
// A request is checked at the front door (method, upgrade, canonical path,
// credentials; frontdoor.go, route.go), resolved once against the
// provider table (provider.go: its API, model, error shape, credential
// header and dialect), classified, read (bounded by
// server.max_body_bytes, server.body_read_timeout and the body memory
// budget; batches and uploads stream through), admitted by the
// quota.Admitter, then forwarded; streamed responses reach the client as
// they arrive. Every request ends as exactly one of forwarded (the
// upstream answered), refused (meterproxy answered with a provider-shaped
// JSON error) or cancelled (the client left first), and is counted so,
// once, when the handler ends (records.count).
//
// A WebSocket upgrade on the Responses API's paths is no such request: it
// opens a socket (socket.go) relayed message by message, on which each
// response.create is a request of its own — a turn, admitted, settled
// and counted by the same code (socketturn.go).
package proxy
