package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
)

// upstreamTrip is an exchange's request's trip upstream: when it went,
// how to stop it, and what ends with the upstream's answer, whatever its
// client's pace (endUpstream).
type upstreamTrip struct {
	once sync.Once
	// start is when forward sent the request; sent is when it last went
	// upstream (a spill sends it again): the provider's headers on its
	// response describe the account as of then.
	start, sent time.Time
	// stop cancels the upstream request (set by rewrite).
	stop func()
	// ctx is the request's context carrying the exchange (withExchange).
	ctx exchangeCtx
	// body is the request's body in memory as setBody made it, which the
	// first pass sends in place of ReverseProxy's wrapper of it; nil for
	// an empty body or one that streams through.
	body io.ReadCloser
	// gauge is the caller's meterproxy_caller_in_flight series, raised
	// when the request went upstream; nil for a batch or an upload.
	gauge prometheus.Gauge
	// ends is what its answer read ahead tells as it ends (readAhead).
	ends upstreamEnds
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
	ex.upstream.sent = ex.upstream.start
	defer func() {
		p := recover()
		h.metering.endUpstream(ex) // when no answer came, or none was read ahead
		if ex.upstream.stop != nil {
			ex.upstream.stop()
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
		resp, err := h.retry.transport.RoundTrip(r)
		if err == nil {
			h.metering.observe(resp, time.Now(), nil)
		}
		return resp, err
	}
	if ex.upstream.body != nil { // a non-empty body in memory, which ReverseProxy wrapped
		r.Body = ex.upstream.body // net/http's in-memory body: head and body in one write (setBody)
	}
	tried := []string{ex.dest.account}
	flex := newFlexTry(ex)
	out := r
	for {
		resp, err := h.retry.transport.RoundTrip(out)
		switch step, wait := flex.next(ex, resp, err, h.retry.flexClock); step {
		case flexRetryAfter:
			drain(resp)
			l := ex.poolLabels()
			h.m.upstream.flexRetries.WithLabelValues(l.Account, l.Pool).Inc()
			ex.trace.tried.flexRetries++
			if err := h.retry.flexClock.sleep(r.Context(), wait); err != nil {
				return nil, err
			}
			if out, err = rewind(r); err != nil {
				return nil, err
			}
			continue
		case flexFallBack:
			drain(resp)
			ex.trace.tried.fallback = true
			out = withBody(r, ex.dest.flex.plain)
			continue
		}
		now := time.Now()
		if err == nil {
			h.metering.observe(resp, now, ex)
		}
		lease := h.accounts.spillTo(r, ex, resp, err, tried)
		if lease == nil {
			if err == nil && ex.dest.noQuota != nil && !ex.live.Shadow { // under mode: shadow nothing forwarded is changed
				resp = noQuotaAnswer(resp, ex)
			}
			if err == nil {
				h.metering.began(resp, ex, now)
			}
			return resp, err
		}
		h.accounts.spill(ex, resp, err, lease)
		tried = append(tried, ex.dest.account)
		if r, err = h.accounts.retarget(r, ex); err != nil {
			return nil, err
		}
		ex.upstream.sent = time.Now()
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
// (readahead.go) — one of declared length below a chunk read whole at
// once (readwhole.go) — within the body memory budget: the upstream's answer
// ends at the upstream's pace, and with it the request's hold on its slot
// (endUpstream). A client the budget cannot carry is cut off
// (cutBodyMemory).
func (h *Handler) readAhead(resp *http.Response, ex *exchange) {
	if resp.Body == nil || resp.Body == http.NoBody {
		h.metering.endUpstream(ex)
		return
	}
	ex.upstream.ends = upstreamEnds{mt: h.metering, ex: ex}
	interactive := ex.res.Class == classify.Interactive
	if resp.ContentLength >= 0 && resp.ContentLength < aheadChunk {
		resp.Body = readWhole(resp.Body, h.bodies.budget, interactive, &ex.upstream.ends) // readwhole.go: no pump
		return
	}
	resp.Body = newReadAhead(resp.Body, h.bodies.budget, interactive, aheadHooks{
		stop: ex.upstream.stop, ends: &ex.upstream.ends, grace: h.aheadGrace})
}

// upstreamEnds is what an exchange's answer read ahead (readAhead) tells
// as it ends: its upstream's end (metering.endUpstream), and its client
// cut off (recorder.starve).
type upstreamEnds struct {
	mt *metering
	ex *exchange
}

func (e *upstreamEnds) ended() { e.mt.endUpstream(e.ex) }
func (e *upstreamEnds) cut()   { e.ex.rec.starve() }

// modifyResponse meters the tokens of successful answers as the body
// passes (the retry loop, roundTrip, observed the answer and settled one
// that is not a success before passing it on); an admitted
// request's answer is read ahead of its client (Handler.readAhead), and
// a metered one's delivery followed (passedBody).
func (h *Handler) modifyResponse(resp *http.Response) error {
	ex := exchangeOf(resp.Request.Context())
	h.meter(resp, ex)
	providerID(resp.Header)
	_, metered := resp.Body.(*meteredBody)
	if ex != nil && ex.tally.lease != nil {
		h.readAhead(resp, ex)
	}
	if metered {
		ex.delivery.passing = passedBody{ReadCloser: resp.Body, d: &ex.delivery, rec: ex.rec}
		resp.Body = &ex.delivery.passing
	}
	return nil
}

// meter is modifyResponse's metering: the settlement of a success that
// is not metered, the meter on a metered one's body, whose end settles it
// (settle).
func (h *Handler) meter(resp *http.Response, ex *exchange) {
	success := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ex != nil && ex.rt.streamed() && success && ex.dest.spent {
		h.batches.answer(resp, ex)
	}
	if ex == nil || !success {
		return
	}
	if ex.rt.api == usage.Other {
		var u *usage.Usage // nothing to read of its usage
		if ex.rt.unmetered() {
			u = &usage.Usage{Input: ex.ask.inputEstimate, Estimated: true}
		}
		h.metering.spend(ex, ex.answer(resp.StatusCode), u, false)
		return
	}
	if ex.ask.background {
		h.m.outcomes.background.WithLabelValues(ex.res.Class.String()).Inc()
	}
	b := &ex.delivery.metered
	b.ReadCloser, b.end, b.settle, b.ex, b.status = resp.Body, &ex.delivery, h.metering, ex, resp.StatusCode
	b.meter.Reset(ex.rt.api, resp.Header.Get("Content-Type"), ex.ask.inputEstimate)
	resp.Body = b
}

// rewrite sends the request to its account (destination.account), with the
// account's key when the proxy holds one.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeOf(pr.In.Context())
	ex.dest.in = pr.In
	acct := h.accounts.get(ex.dest.account)
	pr.SetURL(acct.target)
	pr.Out.Header.Del(ex.live.ClassHeader)
	pr.Out.Header.Del("Expect") // the body is in memory; no 100-continue round trip
	pr.Out.Header[requestIDHeader] = ex.rec.slots.value(slotUpstreamID, ex.access.requestID)
	// An uncompressed body, so usage parsing never sees gzip.
	pr.Out.Header["Accept-Encoding"] = ex.rec.slots.value(slotAcceptEncoding, "identity")
	if acct.key != "" {
		replaceCredential(pr.Out.Header, ex.credential(), acct.key)
	}
	// The answer is read ahead of the client (readahead.go), which stops
	// it by cancelling the request.
	ctx, cancel := context.WithCancel(pr.Out.Context())
	pr.Out, ex.upstream.stop = pr.Out.WithContext(ctx), cancel
}

// upstreamError answers when the upstream could not be reached or did not
// answer in time; a client that left gets nothing.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r.Context())
	if ex.upload.body != nil && ex.upload.body.err() != nil {
		err = ex.upload.body.err() // the client's side failed, not the upstream
	}
	if ex.tally.batch != nil && !neverSent(err) {
		ex.tally.batch.Bind("") // the provider may have created it, under an id never seen: spent in full
	}
	f, clientSide := bodyRefusal(err, true) // only a streamed body is still read here
	if r.Context().Err() != nil && !clientSide {
		return // nothing is written: it counts as cancelled
	}
	switch {
	case clientSide:
		closeUnread(w, r)
	default:
		f = transportRefusal(err)
	}
	if ex.tally.lease != nil {
		// No answer: a failure for the adaptive bound (of this account's
		// requests only), and a request that never left cost nothing.
		ex.tally.lease.Settle(quota.Outcome{Unsent: neverSent(err), Measured: ex.dest.spent && !clientSide})
	}
	h.log.Warn("upstream_failed", slog.String("reason", f.reason), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	ex.refuse(f)
}

// transportRefusal is the answer to a request whose upstream exchange
// failed with err before any answer: 504 when it timed out, else 502.
func transportRefusal(err error) refusal {
	if isTimeout(err) {
		return refusal{status: http.StatusGatewayTimeout, reason: reasonTimeout, kind: "api_error",
			message: "meterproxy: the upstream did not answer in time", retry: true}
	}
	return refusal{status: http.StatusBadGateway, reason: reasonUnreachable, kind: "api_error",
		message: "meterproxy: the upstream could not be reached", retry: true}
}

// neverSent reports whether a transport error says the request never
// left: no connection to the upstream could be made (the dial or the
// name lookup failed). Only then is its token charge given back. Any
// other failure — a timeout, a connection that broke after the request
// was written — may have reached the provider, which charges a request
// as it arrives, so the charge stands.
func neverSent(err error) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	_, ok := errors.AsType[*net.DNSError](err)
	return ok
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return (ok && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded)
}
