// Package proxy is the HTTP side of meterproxy: the chi router, the
// forwarding handler built on httputil.ReverseProxy, the shared upstream
// transport, provider-shaped error answers, the admin endpoints and the
// Prometheus metrics.
//
// A request is read (bounded by server.max_body_bytes), classified, admitted
// by the quota.Limiter, then forwarded; streamed responses reach the client
// as they arrive. Every request ends as exactly one of forwarded (the
// upstream answered), refused (meterproxy answered with a provider-shaped
// JSON error) or cancelled (the client left first), and is counted so.
package proxy
