package proxy

import (
	"net/http"
	"time"
)

// ConnectionLimit is the transport's per-host connection limit: upstream
// max_connections when set, else the per-replica in-flight bound plus a
// little headroom for requests that are not counted (a request whose
// client left, closing while the next one dials), so the pool is never a
// second, accidental gate.
func ConnectionLimit(cfg UpstreamConfig, inFlight int64) int {
	if cfg.MaxConnections > 0 {
		return cfg.MaxConnections
	}
	return int(inFlight) + max(4, int(inFlight)/10)
}

// NewTransport returns the one transport every upstream request shares:
// http.DefaultTransport cloned (the global is never changed) and tuned.
func NewTransport(cfg UpstreamConfig, inFlight int64) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	limit := ConnectionLimit(cfg, inFlight)
	t.MaxConnsPerHost = limit
	t.MaxIdleConnsPerHost = limit // default 2 would churn connections under load
	t.MaxIdleConns = limit
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = cfg.ResponseHeaderTimeout
	t.ForceAttemptHTTP2 = true
	// The body is already in memory: never wait for "100 Continue".
	t.ExpectContinueTimeout = 0
	return t
}
