package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"go.opentelemetry.io/otel/trace"
)

// exchange is one request's metering state, carried to ModifyResponse in
// the request's context.
type exchange struct {
	live *Live // the configuration the request started under
	res  classify.Result
	// endpoint is the request resolved against the provider table: its
	// route (ex.rt) and dialect (ex.dialect).
	endpoint
	// pool is the admission pool the request draws on at account: quota's
	// to pick (Admitter.PoolAt before admission, the Lease's after it);
	// "" is the account's own.
	// pooled says it was resolved: until then metrics say "none".
	pool   string
	pooled bool
	// account is the account the request goes to (Handler.accountOf): ""
	// for the one account of a configuration without upstream.accounts.
	// labels are account's and pool's as metrics name them, computed
	// when either changes (at) rather than on each count. in is the
	// caller's request as the proxy received it, from which spill
	// rebuilds the URL for another account.
	account string
	labels  quota.Labels
	in      *http.Request
	// sent is when the request went upstream: the provider's headers on
	// its response describe the account as of then.
	sent time.Time
	// spent says the request spent this account (the proxy's own key, or
	// a configured caller's): only then may its response's rate-limit
	// headers move the account's state.
	spent bool
	// model is the request's model (modelOf), which prices it;
	// inputEstimate and outputCap are its input estimate and its output
	// ceiling (0: none set), its worst case under a budget, for
	// generations answers (n, best_of).
	model                                 quota.Model
	inputEstimate, outputCap, generations int64
	// hiddenInput says its body hides input the provider bills
	// (usage.Request.HiddenInput), longContext that it asks for
	// Anthropic's long context: its budgets reserve its input at its
	// price's max_input (quota.Request.HiddenInput).
	hiddenInput, longContext bool
	// injected says meterproxy added stream_options.include_usage, so the
	// usage chunk the caller did not ask for must be stripped.
	injected bool
	// flex is set when meterproxy sent the request at the flex tier
	// (prepare; flexretry.go), and tier is the tier its budgets reserve
	// at (quota.Flex.Tier): "" otherwise.
	flex *flexSend
	tier string
	// cost is what the provider charges the request in tokens, as the
	// dialect says, handed to admission (which charges it where the pool
	// enforces tokens); settle says what its usage counts in tokens when
	// the response reports it, for its lease's settlement (settledBy).
	cost   int64
	settle settling
	// background says the request is a Responses one with background:
	// true: answered at once while generation goes on, so an answer
	// without usage is never settled below the charge.
	background bool
	// socket says the request is a WebSocket turn (socketturn.go): its
	// connection goes to one account, so it is admitted there alone
	// (quota.Request.Pinned), and never sent at the flex tier, which
	// only HTTP retries.
	socket bool
	lease  *quota.Lease
	// shadowUsage is the response's usage when no lease charged it: in
	// mode shadow, the shadow decision's lease does (shadowAdmit); nil
	// when it had none.
	shadowUsage *quota.Usage
	// upload is the body of a batch or upload request passing through;
	// uploadMeter meters it when it is a file for batches (batchupload.go);
	// batch is a batch creation's reservation (batchcreate.go).
	upload      *streamedBody
	uploadMeter *uploadMeter
	batch       *gate.BatchHold
	// rec writes every answer to the client and records the request's
	// outcome, counted once when ServeHTTP ends (Handler.count).
	rec *recorder
	// upstream is what ends with the upstream's answer (endUpstream);
	// stopUpstream cancels the upstream request (set by rewrite).
	upstream     upstreamEnd
	stopUpstream func()
	// delivery follows a metered stream's terminal event to the client
	// (delivery.go).
	delivery delivery
	// span is the request's (or the socket turn's) trace span, nil with
	// tracing off; tried counts its upstream attempts for theirs
	// (tracing.go).
	span  trace.Span
	tried attempts
	// access is what its access log line says (accessrecord.go).
	access accessState
}

// flexUnavailable says the answer is flex's 429 Resource Unavailable,
// passed on (flexSend.unavailable); ex may be nil.
func (ex *exchange) flexUnavailable() bool { return ex != nil && ex.flex != nil && ex.flex.unavailable }

// at says the request goes to pool of account, and labels it so.
func (ex *exchange) at(account, pool string) {
	ex.account, ex.pool, ex.labels = account, pool, quota.LabelsOf(account, pool)
}

// poolLabels are the exchange's account and pool as metrics label them
// (noPool until its pool is known); ex may be nil.
func (ex *exchange) poolLabels() quota.Labels {
	if ex == nil || !ex.pooled {
		return noPool
	}
	return ex.labels
}

// stateName is the exchange's pool as /admin/state names it: "none"
// until its pool is known.
func (ex *exchange) stateName() string {
	if !ex.pooled {
		return poolNone
	}
	return quota.StateName(ex.account, ex.pool)
}

// request is what admission is asked for the exchange. It is free of
// budgets when it generates nothing, or spends another account than this
// one (a pass-through caller's own key, exchange.spent): no budget here
// counts that account's spend, so none may hold it.
func (ex *exchange) request() quota.Request {
	return quota.Request{Class: ex.res.Class, Caller: ex.res.Caller, Anonymous: ex.res.Anonymous, Tokens: ex.cost,
		Model: ex.model, Account: ex.account, Pinned: ex.socket, Free: !ex.rt.generates || !ex.spent, Unmetered: ex.rt.unmetered(),
		CostBounds: quota.CostBounds{InputTokens: ex.inputEstimate, OutputTokens: ex.outputCap, Generations: ex.generations,
			Tier: ex.tier, HiddenInput: ex.hiddenInput, LongContext: ex.longContext}}
}

type exchangeKey struct{}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

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
	if ex != nil && ex.lease != nil {
		h.readAhead(resp, ex)
	}
	if metered {
		resp.Body = &passedBody{ReadCloser: resp.Body, d: &ex.delivery, rec: ex.rec}
	}
	return nil
}

// meter is modifyResponse's metering: the settlement of a success that
// is not metered, the meter on a metered one's body, whose end settles it
// (settle).
func (h *Handler) meter(resp *http.Response, ex *exchange) {
	success := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ex != nil && ex.rt.streamed() && success && ex.spent {
		h.batchAnswer(resp, ex)
	}
	if ex == nil || !success {
		return
	}
	if ex.rt.api == usage.Other {
		var u *usage.Usage // nothing to read of its usage
		if ex.rt.unmetered() {
			u = &usage.Usage{Input: ex.inputEstimate, Estimated: true}
		}
		h.spend(ex, ex.answer(resp.StatusCode), u, false)
		return
	}
	if ex.background {
		h.m.outcomes.background.WithLabelValues(ex.res.Class.String()).Inc()
	}
	meter := usage.NewMeter(ex.rt.api, resp.Header.Get("Content-Type"), ex.inputEstimate)
	resp.Body = &meteredBody{
		ReadCloser: resp.Body,
		meter:      meter,
		end:        &ex.delivery,
		done:       func(u usage.Usage) { h.settle(ex, ex.answer(resp.StatusCode), u, meter.Cut()) },
	}
}

// answered is what the upstream's answer to ex says as it begins, from
// its status and headers (resp; a socket turn's first event stands in
// for it, socketturn.go): the account's state (observe), and the lease of
// an answer that is not a success settled at once (its outcome: quota
// gives its charge back). A success's lease is settled when its usage is
// known (settle).
func (h *Handler) answered(resp *http.Response, ex *exchange) {
	now := time.Now()
	h.observe(resp, now, ex)
	h.began(resp, ex, now)
}

// began is answered's part for the answer to ex passed on to its client,
// which began at now, once observed: its access log fields, and its lease
// settled at once if it is not a success. The retry loop (roundTrip)
// calls it for an HTTP answer, having observed it itself.
func (h *Handler) began(resp *http.Response, ex *exchange, now time.Time) {
	if ex == nil {
		return
	}
	ex.access.answered(resp.Header, now)
	if success := resp.StatusCode >= 200 && resp.StatusCode < 300; !success && ex.lease != nil {
		ex.lease.Settle(ex.answer(resp.StatusCode))
	}
}

// answer is the outcome of ex's upstream exchange answered with status
// (0: no answer came), as its lease settles it: measured for the adaptive
// bound only when the request spent this account (a caller's own key's
// 429 is its account's), and not flex's lack of capacity, which says
// nothing of the account.
func (ex *exchange) answer(status int) quota.Outcome {
	return quota.Outcome{Status: status, Measured: ex.spent && !ex.flexUnavailable()}
}

// settle settles ex's answer, whose outcome is o, once its usage u is
// known — read from its body as it ended (meteredBody), or from a socket
// turn's terminal event (socketturn.go) — cut saying it was cut short
// (usage.Meter.Cut): its tokens counted, its lease settled and its cost
// counted (spend).
func (h *Handler) settle(ex *exchange, o quota.Outcome, u usage.Usage, cut bool) {
	h.tr.settled(ex, u)
	h.m.countTokens(ex.poolLabels(), ex.res, u)
	ex.access.tally.settled(u)
	h.spend(ex, o, &u, cut)
}

// spend settles ex's lease by the outcome o of its exchange and the usage
// u its answer reported (nil: none to read), cut saying it was cut short
// (usage.Meter.Cut) — quota decides what that charges (quota.Lease.Settle)
// — and counts the cost its budgets were charged. Without a lease it
// prices u at the prices in force, and counts that. Only a response that
// spent this account counts (a caller's own key spends another's).
func (h *Handler) spend(ex *exchange, o quota.Outcome, u *usage.Usage, cut bool) {
	if u != nil {
		o.Usage = ex.settledBy(*u, cut)
	}
	if ex.lease != nil {
		if s := ex.lease.Settle(o); s.Charged {
			h.m.countSpend(ex.poolLabels(), ex.res, s.Cost, s.Priced, u.Estimated)
			ex.access.tally.charged(s.Cost, s.Priced)
		}
		return
	}
	if u == nil || !ex.spent {
		return
	}
	var cost price.Nanodollars
	var priced bool
	if ex.rt.unmetered() {
		// No usage to price: its worst case, as its budgets are charged.
		cost, priced = h.admitter.WorstCase(ex.request())
	} else {
		cost, priced = h.admitter.Cost(ex.model, o.Usage.Priced)
	}
	ex.shadowUsage = o.Usage // for the shadow lease's budgets, if there is one
	h.m.countSpend(ex.poolLabels(), ex.res, cost, priced, u.Estimated)
	ex.access.tally.charged(cost, priced)
}

// settledBy is the usage u of ex's response as its lease is settled to
// it, cut saying it was cut short: priced; counted in tokens as its
// dialect counts them (settling); at its worst case when it cannot say
// what it cost (usageUnknown); charged to budgets only when it spent this
// account.
func (ex *exchange) settledBy(u usage.Usage, cut bool) *quota.Usage {
	return &quota.Usage{
		Priced: price.Usage{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Output: u.Output, Tier: u.Tier,
			AudioInput: u.AudioInput, AudioOutput: u.AudioOutput},
		Tokens: ex.settle.of(u), Settles: ex.settle != settleNone, Estimated: u.Estimated,
		Worst: usageUnknown(ex, u, cut), Charged: ex.spent,
	}
}

// usageUnknown reports whether the usage u of the exchange's response
// cannot bound what it cost, so that its budgets are charged its worst
// case (quota.Usage.Worst: the whole of it, at max_input for hidden
// input, or u priced if dearer) rather than u: an answer of an API whose
// answers report no usage the proxy reads (route.unmetered, under
// budget.unpriced_apis: worst_case), a background Responses
// answer without usage, which comes before the generation, and a
// response cut before its usage came in full (cut), which is estimated
// at the text it showed — below what a reasoning model bills for the
// reasoning it never shows, and the generation may go on after the cut.
// A response that ended whole without usage (an OpenAI chat stream
// without include_usage) stays priced at its estimate.
func usageUnknown(ex *exchange, u usage.Usage, cut bool) bool {
	return ex.rt.unmetered() || u.Estimated && (ex.background || cut)
}

// observe tells the limiter what the upstream said about the account: bulk
// is held while any reported remaining allowance is below the interactive
// reserve the account keeps (quota.Admitter.HeaderReserve: none at an
// account that serves bulk alone or only lends), until the announced
// reset, and for the retry hint of a 429.
// Headers that say nothing known change nothing.
//
// Only a response to a request that spent this account (see
// exchange.spent) is read: in pass-through mode anyone may send another
// account's key, and that account's exhaustion is not ours to act on. And
// no response holds bulk longer than upstream.max_hold.
//
// Flex's 429 Resource Unavailable passed on after max_wait (flexretry.go)
// is no rate limit of the account: it is not counted in
// meterproxy_upstream_429_total, and holds nothing.
func (h *Handler) observe(resp *http.Response, now time.Time, ex *exchange) {
	limited := resp.StatusCode == http.StatusTooManyRequests && !ex.flexUnavailable()
	if limited {
		h.m.upstream.upstream429.Inc()
	}
	if ex == nil || !ex.spent {
		return
	}
	obs := ratelimit.Parse(resp.Header, now)
	h.heed(ex, obs, resp.StatusCode, limited, refillOf(ex.live.Refill, ex.dialect, resp.Header), now)
}

// heed acts on what the upstream said of ex's account and pool — obs,
// from its answer of status (limited: a rate limit of the account) or
// from an event that says the same (a Realtime rate_limits.updated),
// whose buckets refill as refill says — received at now: observe's rule.
func (h *Handler) heed(ex *exchange, obs ratelimit.Observation, status int, limited bool, refill ratelimit.Refill, now time.Time) {
	h.m.observeUpstream(ex.poolLabels(), obs)
	var throttle time.Duration
	if limited && obs.RetryAfter > 0 {
		throttle = min(obs.RetryAfter, h.maxHold)
	}
	known := obs.Requests.Known() || obs.Tokens.Known() || obs.InputTokens.Known() || obs.OutputTokens.Known()
	if !known && throttle == 0 {
		return
	}
	h.last.set(ex.poolLabels(), ex.stateName(), obs, status, now)
	hold, _ := obs.BelowReserve(h.admitter.HeaderReserve(ex.account), refill) // 0 when above
	hold = min(hold, h.maxHold)
	// The observation is dated when the request was sent, not when its
	// response came back: the provider debited the account in the order
	// requests reached it, so of two responses the one sent later is the
	// fresher word, even when it arrives first (a response above the
	// reserve that was sent earlier must not lift the hold a later one
	// set). Holds still end when the response said, counted from its
	// receipt.
	at := now
	if !ex.sent.IsZero() && ex.sent.Before(now) {
		at = ex.sent
	}
	lead := now.Sub(at)
	if hold > 0 {
		hold += lead
	}
	if throttle > 0 {
		throttle += lead
	}
	h.admitter.Observe(ex.account, ex.pool, at, hold, throttle)
}

// meteredBody feeds a copy of every byte read to a usage.Meter, and reports
// the usage once: at EOF (complete) or at Close before EOF (cut short).
// The meter holds at most about 65 KiB of the body however large it is and
// however slowly the client reads it (see usage.Meter), so the bodies in
// flight cost at most the in-flight bound times that.
//
// It tells end when the stream's terminal event has been read (delivery).
type meteredBody struct {
	io.ReadCloser
	meter *usage.Meter
	end   *delivery
	read  int64
	done  func(usage.Usage)
	once  sync.Once
}

// Read implements io.Reader.
func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		_, _ = b.meter.Write(p[:n]) // never fails
		b.read += int64(n)
		if b.meter.Terminal() {
			b.end.sawTerminal(b.read)
		}
	}
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// Close implements io.Closer.
func (b *meteredBody) Close() error {
	b.finish(false)
	return b.ReadCloser.Close()
}

func (b *meteredBody) finish(complete bool) {
	b.once.Do(func() { b.done(b.meter.Finish(complete)) })
}
