package proxy

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
)

// upstreamEnd is what ends with the upstream's answer to an exchange,
// whatever its client's pace (endUpstream).
type upstreamEnd struct {
	once sync.Once
	// start is when forward sent the request.
	start time.Time
	// gauge is the caller's meterproxy_caller_in_flight series, raised
	// when the request went upstream; nil for a batch or an upload.
	gauge prometheus.Gauge
}

// forward sends the request upstream through w, which writes to ex.rec;
// its outcome is counted when ServeHTTP ends (count). An admitted
// request's answer is read ahead of its client (readAhead), so that its
// slot is released when the upstream's answer ends, not when the client
// has read it. A response cut short makes ReverseProxy panic with
// http.ErrAbortHandler: the cut is counted here, before the request's
// outcome, so a reading that has the outcome has the cut too, and the
// panic goes on to net/http. An answer whose last bytes the client never
// takes (the final flush fails) counts as cut by the client too — but
// not a stream whose terminal event had passed to the client (delivery):
// that one is whole, whatever its client did next. A client meterproxy
// cut off itself (too slow for server.write_stall_timeout or for the body
// memory budget) is logged.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, ex *exchange) {
	ex.upstream.start = time.Now()
	ex.sent = ex.upstream.start
	defer func() {
		p := recover()
		h.endUpstream(ex) // when no answer came, or none was read ahead
		if ex.stopUpstream != nil {
			ex.stopUpstream()
		}
		if p == nil {
			return
		}
		side := "upstream"
		if r.Context().Err() != nil || ex.rec.clientCut() {
			side = "client" // it left, writing to it failed before that was noticed, or it was cut off
		}
		if side == "upstream" || !ex.delivery.whole() {
			h.cutShort(r, ex, side)
		}
		panic(p)
	}()
	h.rp.ServeHTTP(w, r)
	// What net/http still buffers of the answer goes out now, within the
	// write deadline, so an answer the client never took counts as cut,
	// not as delivered whole once the handler returned.
	if ex.rec.refused == "" && ex.rec.status != 0 && ex.rec.FlushError() != nil && !ex.delivery.whole() {
		h.cutShort(r, ex, "client")
	}
}

// roundTrip is the forward path's retry loop, ReverseProxy's transport,
// in the shape of Caddy's reverse proxy (its proxyLoopIteration): each
// pass sends the request to its lease's account through h.upstream, the
// shared transport, and asks what the outcome calls for — a retry at flex
// after a backoff or a resend at the default tier while flex has no
// capacity (flexTry), a move to another account (spillTo, spill), or the
// answer passed on to ReverseProxy, which answers the client (a failure
// too). The answer that ends a pass at an account is observed here, once
// (observe); the one passed on is recorded and, if not a success,
// settled (began). What is kept per account — flex's backoff and
// deadline, whether the fallback went — starts afresh at each.
func (h *Handler) roundTrip(r *http.Request) (*http.Response, error) {
	ex := exchangeOf(r.Context())
	if ex == nil {
		resp, err := h.upstream.RoundTrip(r)
		if err == nil {
			h.observe(resp, time.Now(), nil)
		}
		return resp, err
	}
	tried := []string{ex.account}
	flex := newFlexTry(ex)
	out := r
	for {
		resp, err := h.upstream.RoundTrip(out)
		switch step, wait := flex.next(ex, resp, err, h.flexClock); step {
		case flexRetryAfter:
			drain(resp)
			l := ex.poolLabels()
			h.m.upstream.flexRetries.WithLabelValues(l.Account, l.Pool).Inc()
			ex.tried.flexRetries++
			if err := h.flexClock.sleep(r.Context(), wait); err != nil {
				return nil, err
			}
			if out, err = rewind(r); err != nil {
				return nil, err
			}
			continue
		case flexFallBack:
			drain(resp)
			ex.tried.fallback = true
			out = withBody(r, ex.flex.plain)
			continue
		}
		now := time.Now()
		if err == nil {
			h.observe(resp, now, ex)
		}
		lease := h.spillTo(r, ex, resp, err, tried)
		if lease == nil {
			if err == nil {
				h.began(resp, ex, now)
			}
			return resp, err
		}
		h.spill(ex, resp, err, lease)
		tried = append(tried, ex.account)
		if r, err = h.retarget(r, ex); err != nil {
			return nil, err
		}
		ex.sent = time.Now()
		flex, out = newFlexTry(ex), r
	}
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cutShort counts ex's answer cut short by side, and logs a client
// meterproxy cut off itself.
func (h *Handler) cutShort(r *http.Request, ex *exchange, side string) {
	class := ex.res.Class.String()
	h.m.outcomes.cutShort.WithLabelValues(class, side).Inc()
	ex.cutBy(side)
	if why := ex.rec.cutFor(); why != "" {
		h.log.Warn("client_cut", slog.String("reason", why), slog.String("caller", ex.res.Caller),
			slog.String("class", class), slog.String("path", r.URL.Path))
	}
}

// readAhead makes an admitted request's answer read ahead of its client
// (readahead.go), within the body memory budget: the upstream's answer
// ends at the upstream's pace, and with it the request's hold on its slot
// (endUpstream). A client the budget cannot carry is cut off
// (cutBodyMemory).
func (h *Handler) readAhead(resp *http.Response, ex *exchange) {
	if resp.Body == nil || resp.Body == http.NoBody {
		h.endUpstream(ex)
		return
	}
	resp.Body = newReadAhead(resp.Body, h.bodies.budget, ex.res.Class == classify.Interactive, aheadHooks{
		stop: ex.stopUpstream, ended: func() { h.endUpstream(ex) }, cut: ex.rec.starve, grace: h.aheadGrace})
}

// endUpstream runs once, when the upstream's answer to ex has ended (its
// body whole or broken off, or no answer at all), before the client may
// have read it: the upstream's service time is measured
// (meterproxy_upstream_duration_seconds, the Little's-law meter), the
// caller's meterproxy_caller_in_flight comes down, and the lease is
// released — its slot, its caller's gates, and the adaptive bound's
// latency, admission to now. Its usage was settled before, as its body
// ended (meteredBody).
func (h *Handler) endUpstream(ex *exchange) {
	ex.upstream.once.Do(func() {
		end := time.Now()
		took := end.Sub(ex.upstream.start)
		h.m.upstream.duration.WithLabelValues(ex.res.Class.String()).Observe(took.Seconds())
		h.m.admission.little[ex.res.Class].add(end, took)
		if ex.upstream.gauge != nil {
			ex.upstream.gauge.Dec()
		}
		if ex.lease != nil {
			ex.lease.Release()
		}
	})
}
