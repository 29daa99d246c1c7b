package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/internal/repeatlog"
	"github.com/meterproxy/meterproxy/quota"
)

// spillTo is the spill decision of the forward path's retry loop
// (Handler.roundTrip) for metered requests behind several accounts
// (upstream.accounts), on the outcome of sending r to ex's account —
// resp, or err: the lease of another account its class may go to, which
// the request moves to, or nil when it is passed on as it is. A request
// its account answers 429 — the account's own limit, a provisioned
// deployment that is full — or that no connection to its account could be
// made for (neverSent: the upstream down, its name unresolved; the request
// never left, so sending it elsewhere cannot send it twice) is moved to
// another account (quota.Admitter.Readmit: within what is left of its
// max_wait, its caller gates' pass moving with it). The caller sees the
// 429 or the 502 only when no other account admits the request in time.
// A 429 not passed on still holds its account, as every 429 does: the
// loop observed it before asking, so the refusal holds its account before
// the request looks elsewhere. A failure after the request was written (a
// reset, a timeout) is not moved: the provider may have it. Flex's
// Resource Unavailable is flexTry's: it says nothing of the account.
// tried are the accounts tried so far.
func (a *accounts) spillTo(r *http.Request, ex *exchange, resp *http.Response, err error, tried []string) *quota.Lease {
	if ex.tally.lease == nil || !movable(r, resp, err, ex) || !a.admitter.Others(ex.res.Class, ex.among, tried) {
		return nil
	}
	// The refusing account's lease is settled: its measurement counts the
	// 429, or no answer as a failure (adaptive bound), when Readmit
	// releases it, and its charge is given back.
	o := quota.Outcome{Unsent: err != nil, Measured: true}
	if err == nil {
		o.Status = resp.StatusCode
	}
	ex.tally.lease.Settle(o)
	lease, aerr := a.admitter.Readmit(r.Context(), ex.tally.lease, ex.request(), tried)
	if aerr != nil {
		return nil // passed on: a 429 already observed, or the failure the handler answers and logs
	}
	return lease
}

// spill moves ex, whose request its account refused (resp) or could not
// be sent to (err), to lease, at another account: the refusal drained,
// the move counted in meterproxy_account_spills_total by the account it
// left, a move from an unreachable account logged (account_unreachable;
// a failure not moved is the handler's to log).
func (a *accounts) spill(ex *exchange, resp *http.Response, err error, lease *quota.Lease) {
	if resp != nil {
		drain(resp)
	} else {
		a.unreachable.warn(a.log, ex.dest.account, err)
	}
	a.m.upstream.spills.WithLabelValues(ex.dest.account).Inc()
	ex.trace.tried.spills++
	ex.admitted(lease)
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
func (a *accounts) retarget(r *http.Request, ex *exchange) (*http.Request, error) {
	r2, err := rewind(r)
	if err != nil {
		return nil, err
	}
	acct := a.get(ex.dest.account)
	(&httputil.ProxyRequest{In: ex.dest.in, Out: r2}).SetURL(acct.target)
	if acct.key != "" {
		replaceCredential(r2.Header, ex.credential(), acct.key)
	}
	return r2, nil
}

// unreachableEvery is how often, at most, account_unreachable reaches the
// log for one account while its moves repeat: an account that is down
// fails every request sent to it, and each is moved.
const unreachableEvery = time.Minute

// unreachableLog keeps account_unreachable to a line a minute per account,
// as the Redis client's log is kept (repeatlog): each line says how many
// moves it stands for. Its zero value is ready; safe for concurrent use.
type unreachableLog struct {
	mu sync.Mutex
	by map[string]*repeatlog.Summary // by account name: a closed set, the configured accounts
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// warn logs, or counts, a move from account, unreachable with err.
func (u *unreachableLog) warn(log *slog.Logger, account string, err error) {
	u.mu.Lock()
	if u.by == nil {
		u.by = map[string]*repeatlog.Summary{}
	}
	s, ok := u.by[account]
	if !ok {
		s = &repeatlog.Summary{}
		u.by[account] = s
	}
	now := time.Now
	if u.now != nil {
		now = u.now
	}
	u.mu.Unlock()
	if attrs, ok := s.Take(now(), unreachableEvery, slog.String("account", account), slog.String("error", err.Error())); ok {
		log.Warn("account_unreachable", attrs...)
	}
}
