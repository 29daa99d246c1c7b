package proxy

import (
	"net/http"
	"time"
)

// roundTrip is the forward path's retry loop, ReverseProxy's transport
// for metered requests, in the shape of Caddy's reverse proxy (its
// proxyLoopIteration): each iteration sends the request to its lease's
// account through h.upstream — which holds a request sent at flex at that
// account while flex has no capacity (flexretry.go) — and asks what the
// outcome calls for (spillTo); a request moved to another account
// (spill) is sent afresh there, and the loop goes on until an answer or a
// failure is passed on to ReverseProxy, which answers the client.
func (h *Handler) roundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.upstream.RoundTrip(r)
	ex := exchangeOf(r.Context())
	if ex == nil || ex.lease == nil {
		return resp, err
	}
	tried := []string{ex.account}
	for {
		lease := h.spillTo(r, ex, resp, err, tried)
		if lease == nil {
			return resp, err
		}
		h.spill(ex, resp, err, lease)
		tried = append(tried, ex.account)
		if r, err = h.retarget(r, ex); err != nil {
			return nil, err
		}
		ex.sent = time.Now()
		resp, err = h.upstream.RoundTrip(r)
	}
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
