package proxy

import (
	"net/http"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// answered is what the upstream's answer to ex says as it begins, from
// its status and headers (resp; a socket turn's first event stands in
// for it, socketturn.go): the account's state (observe), and the lease of
// an answer that is not a success settled at once (its outcome: quota
// gives its charge back). A success's lease is settled when its usage is
// known (settle).
func (mt *metering) answered(resp *http.Response, ex *exchange) {
	now := time.Now()
	mt.observe(resp, now, ex)
	mt.began(resp, ex, now)
}

// began is answered's part for the answer to ex passed on to its client,
// which began at now, once observed: its access log fields, and its lease
// settled at once if it is not a success. The retry loop (roundTrip)
// calls it for an HTTP answer, having observed it itself.
func (mt *metering) began(resp *http.Response, ex *exchange, now time.Time) {
	if ex == nil {
		return
	}
	ex.access.answered(resp.Header, now)
	if success := resp.StatusCode >= 200 && resp.StatusCode < 300; !success && ex.tally.lease != nil {
		ex.tally.lease.Settle(ex.answer(resp.StatusCode))
	}
}

// settle settles ex's answer, whose outcome is o, once its usage u is
// known — read from its body as it ended (meteredBody), or from a socket
// turn's terminal event (socketturn.go) — cut saying it was cut short
// (usage.Meter.Cut): its tokens counted, its lease settled and its cost
// counted (spend).
func (mt *metering) settle(ex *exchange, o quota.Outcome, u usage.Usage, cut bool) {
	mt.tr.settled(ex, u)
	mt.m.countTokens(ex.poolLabels(), ex.res, u)
	ex.access.tally.settled(u)
	mt.spend(ex, o, &u, cut)
}

// spend settles ex's lease by the outcome o of its exchange and the usage
// u its answer reported (nil: none to read), cut saying it was cut short
// (usage.Meter.Cut) — quota decides what that charges (quota.Lease.Settle)
// — and counts the cost its budgets were charged. Without a lease it
// prices u at the prices in force, and counts that; in mode shadow its
// budgets are charged that, whatever they have left (the shadow
// decision beside it reserves nothing). Only a response that spent this
// account counts (a caller's own key spends another's).
func (mt *metering) spend(ex *exchange, o quota.Outcome, u *usage.Usage, cut bool) {
	if u != nil {
		o.Usage = ex.settledBy(*u, cut)
	}
	if ex.tally.lease != nil {
		if s := ex.tally.lease.Settle(o); s.Charged {
			mt.m.countSpend(ex.poolLabels(), ex.res, s.Cost, s.Priced, u.Estimated)
			ex.access.tally.charged(s.Cost, s.Priced)
		}
		return
	}
	if u == nil || !ex.dest.spent {
		return
	}
	var cost price.Nanodollars
	var priced bool
	if ex.rt.unmetered() {
		// No usage to price: its worst case, as its budgets are charged.
		cost, priced = mt.admitter.WorstCase(ex.request())
	} else {
		cost, priced = mt.admitter.Cost(ex.ask.model, o.Usage.Priced)
	}
	if ex.live.Shadow && priced {
		mt.admitter.Charge(ex.request(), cost) // forwarded unadmitted: its budgets are charged what it spent
	}
	mt.m.countSpend(ex.poolLabels(), ex.res, cost, priced, u.Estimated)
	ex.access.tally.charged(cost, priced)
}

// observe tells the limiter what the upstream said about the account: bulk
// is held while any reported remaining allowance is below the interactive
// reserve the account keeps (quota.Admitter.HeaderReserve: none at an
// account that serves bulk alone or only lends), until the announced
// reset, and for the retry hint of a 429.
// Headers that say nothing known change nothing.
//
// Only a response to a request that spent this account (see
// destination.spent) is read: in pass-through mode anyone may send another
// account's key, and that account's exhaustion is not ours to act on. And
// no response holds bulk longer than upstream.max_hold.
//
// Flex's 429 Resource Unavailable passed on after max_wait (flexretry.go)
// is no rate limit of the account: it is not counted in
// meterproxy_upstream_429_total, and holds nothing. Gemini says what its
// 429 means in its body (geminilimit.go): its retry delay holds as a
// Retry-After does, and a tier without quota for the model holds nothing.
func (mt *metering) observe(resp *http.Response, now time.Time, ex *exchange) {
	limited := resp.StatusCode == http.StatusTooManyRequests && !ex.flexUnavailable()
	if limited {
		mt.m.upstream.upstream429.Inc()
	}
	if ex == nil || !ex.dest.spent {
		return
	}
	ex.dest.noQuota = nil
	obs := ratelimit.Parse(resp.Header, now)
	if limited && ex.fromGoogle() && heedGoogle(resp, ex, &obs) {
		return // no quota for the model: nothing to wait for (geminilimit.go)
	}
	mt.heed(ex, obs, resp.StatusCode, limited, refillOf(ex.live.Refill, ex.dialect, resp.Header), now)
}

// heed acts on what the upstream said of ex's account and pool — obs,
// from its answer of status (limited: a rate limit of the account) or
// from an event that says the same (a Realtime rate_limits.updated),
// whose buckets refill as refill says — received at now: observe's rule.
func (mt *metering) heed(ex *exchange, obs ratelimit.Observation, status int, limited bool, refill ratelimit.Refill, now time.Time) {
	mt.m.observeUpstream(ex.poolLabels(), obs)
	var throttle time.Duration
	if limited && obs.RetryAfter > 0 {
		throttle = min(obs.RetryAfter, mt.maxHold)
	}
	known := obs.Requests.Known() || obs.Tokens.Known() || obs.InputTokens.Known() || obs.OutputTokens.Known() || obs.OverLimit
	if !known && throttle == 0 {
		return
	}
	mt.last.set(ex.poolLabels(), ex.stateName(), obs, status, now)
	hold, _ := obs.BelowReserve(mt.admitter.HeaderReserve(ex.dest.account), refill) // 0 when above
	hold = min(hold, mt.maxHold)
	// The observation is dated when the request was sent, not when its
	// response came back: the provider debited the account in the order
	// requests reached it, so of two responses the one sent later is the
	// fresher word, even when it arrives first (a response above the
	// reserve that was sent earlier must not lift the hold a later one
	// set). Holds still end when the response said, counted from its
	// receipt.
	at := now
	if !ex.upstream.sent.IsZero() && ex.upstream.sent.Before(now) {
		at = ex.upstream.sent
	}
	lead := now.Sub(at)
	if hold > 0 {
		hold += lead
	}
	if throttle > 0 {
		throttle += lead
	}
	mt.admitter.Observe(ex.dest.account, ex.dest.pool, at, hold, throttle)
}

// endUpstream runs once, when the upstream's answer to ex has ended (its
// body whole or broken off, or no answer at all), before the client may
// have read it: the upstream's service time is measured
// (meterproxy_upstream_duration_seconds, the Little's-law meter), the
// caller's meterproxy_caller_in_flight comes down, and the lease is
// released — its slot, its caller's gates, and the adaptive bound's
// latency, admission to now. Its usage was settled before, as its body
// ended (meteredBody).
func (mt *metering) endUpstream(ex *exchange) {
	ex.upstream.once.Do(func() {
		end := time.Now()
		took := end.Sub(ex.upstream.start)
		served := ex.poolLabels() // the account that answered: after a spill, the one it moved to
		mt.m.upstream.duration.WithLabelValues(served.Account, served.Pool, ex.res.Class.String()).Observe(took.Seconds())
		mt.m.admission.little[ex.res.Class].add(end, took)
		if ex.upstream.gauge != nil {
			ex.upstream.gauge.Dec()
		}
		if ex.tally.lease != nil {
			ex.tally.lease.Release()
		}
	})
}
