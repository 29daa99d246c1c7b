package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// spill is the transport of metered requests behind several accounts
// (upstream.accounts): a request its account answers 429 — the account's
// own limit, a provisioned deployment that is full — or that no
// connection to its account could be made for (neverSent: the upstream
// down, its name unresolved; the request never left, so sending it
// elsewhere cannot send it twice) is moved to another account its class
// may go to (quota.Admitter.Readmit: within what is left of its max_wait,
// its caller gates' pass moving with it) and sent there. The caller sees
// the 429 or the 502 only when no other account admits the request in
// time. A 429 not passed on still holds its account, as every 429 does
// (observe); each move counts in meterproxy_account_spills_total by the
// account it left, and a move from an unreachable account is logged
// (account_unreachable; a failure not moved is the handler's to log).
// A failure after the request was written (a reset, a timeout) is not
// moved: the provider may have it. Flex's Resource Unavailable is
// flexRetry's (spill sits outside it): it says nothing of the account.
// Safe for concurrent use.
type spill struct {
	next   http.RoundTripper
	h      *Handler
	spills *prometheus.CounterVec // by account
}

var _ http.RoundTripper = (*spill)(nil)

// CloseIdleConnections closes next's idle connections.
func (t *spill) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *spill) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	ex := exchangeOf(r.Context())
	if ex == nil || ex.lease == nil {
		return resp, err
	}
	tried := []string{ex.account}
	for movable(r, resp, err, ex) && t.h.admitter.Others(ex.res.Class, tried) {
		// The refusing account's lease is settled: its measurement counts
		// the 429, or no answer as a failure (adaptive bound), when Readmit
		// releases it, and its charge is given back.
		o := quota.Outcome{Unsent: err != nil, Measured: true}
		if err == nil {
			t.h.observe(resp, time.Now(), ex) // the refusal holds its account before the request looks elsewhere
			ex.observed = true
			o.Status = resp.StatusCode
		}
		ex.lease.Settle(o)
		lease, aerr := t.h.admitter.Readmit(r.Context(), ex.lease, ex.request(), tried)
		if aerr != nil {
			return resp, err // passed on: a 429 already observed, or the failure the handler answers and logs
		}
		if resp != nil {
			drain(resp)
		} else {
			t.h.log.Warn("account_unreachable", slog.String("account", ex.account), slog.String("error", err.Error()))
		}
		t.spills.WithLabelValues(ex.account).Inc()
		ex.tried.spills++
		ex.lease, ex.observed = lease, false
		ex.at(lease.Account(), lease.Pool())
		tried = append(tried, ex.account)
		if r, err = t.h.retarget(r, ex); err != nil {
			return nil, err
		}
		ex.sent = time.Now()
		resp, err = t.next.RoundTrip(r)
	}
	return resp, err
}

// movable reports whether the outcome of sending r to its account lets
// it move to another: a 429 of the account's own (not flex's lack of
// capacity), or a failure before the request left — not one because its
// client left (a dial cut short by the request's context).
func movable(r *http.Request, resp *http.Response, err error, ex *exchange) bool {
	if err != nil {
		return neverSent(err) && r.Context().Err() == nil
	}
	return resp.StatusCode == http.StatusTooManyRequests && !ex.flexUnavailable()
}

// retarget is r, sent once already, sent afresh to ex's account: its URL
// rebuilt from the caller's request against the account's, and the
// account's key in place of the last one's.
func (h *Handler) retarget(r *http.Request, ex *exchange) (*http.Request, error) {
	r2, err := rewind(r)
	if err != nil {
		return nil, err
	}
	acct := h.account(ex.account)
	(&httputil.ProxyRequest{In: ex.in, Out: r2}).SetURL(acct.target)
	if acct.key != "" {
		replaceCredential(r2.Header, ex.credential(), acct.key)
	}
	return r2, nil
}
