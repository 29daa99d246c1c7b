package proxy

import (
	"net/http"
	"time"
)

// ConnectionLimit is the transport's per-host connection limit for
// metered requests: upstream max_connections when set, else the
// per-replica in-flight bound plus a little headroom for requests that are
// not counted (a request whose client left, closing while the next one
// dials), so the pool is never a second, accidental gate.
func ConnectionLimit(cfg UpstreamConfig, inFlight int64) int {
	if cfg.MaxConnections > 0 {
		return cfg.MaxConnections
	}
	return int(inFlight) + max(4, int(inFlight)/10)
}

// streamedConnectionLimit is the connection limit of the pool batches and
// uploads use: a quarter of the metered pool's, at least 4. Their bodies
// come at the client's pace and no window bounds them, so they get a pool
// of their own: slow uploads can never take a connection a metered request
// needs. Past the limit an upload waits for a connection (bounded by its
// client's patience), holding no body in memory.
func streamedConnectionLimit(metered int) int { return max(4, metered/4) }

// Transport is the one transport every upstream request shares: two
// pools cloned from http.DefaultTransport (the global is never changed)
// and tuned, one for metered requests and one for batches and uploads. It
// is safe for concurrent use.
type Transport struct {
	metered, streamed *http.Transport
	// sockets dials WebSocket handshakes (socket.go): a connection that
	// becomes a socket leaves its pool, but counts against its limit as
	// long as it lives, so sockets have a pool of their own, unlimited
	// (server.max_sockets_per_caller bounds them), never HTTP/2.
	sockets *http.Transport
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns the shared transport for cfg, sized for inFlight
// requests at once.
func NewTransport(cfg UpstreamConfig, inFlight int64) *Transport {
	limit := ConnectionLimit(cfg, inFlight)
	sockets := newPool(cfg, 0)
	sockets.ForceAttemptHTTP2 = false
	return &Transport{metered: newPool(cfg, limit), streamed: newPool(cfg, streamedConnectionLimit(limit)), sockets: sockets}
}

func newPool(cfg UpstreamConfig, limit int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxConnsPerHost = limit
	t.MaxIdleConnsPerHost = limit // default 2 would churn connections under load
	t.MaxIdleConns = limit
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = cfg.ResponseHeaderTimeout
	t.ForceAttemptHTTP2 = true
	// Metered bodies are already in memory, and an upload's client sent
	// its own Expect if it wanted one: never wait for "100 Continue".
	t.ExpectContinueTimeout = 0
	return t
}

// RoundTrip implements http.RoundTripper: batches and uploads go through
// their own pool, and WebSocket handshakes through theirs.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if hasToken(r.Header, "Upgrade", "websocket") {
		return t.sockets.RoundTrip(r)
	}
	if ex := exchangeOf(r.Context()); ex != nil && ex.rt.streamed() {
		return t.streamed.RoundTrip(r)
	}
	return t.metered.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the pools.
func (t *Transport) CloseIdleConnections() {
	t.metered.CloseIdleConnections()
	t.streamed.CloseIdleConnections()
	t.sockets.CloseIdleConnections()
}
