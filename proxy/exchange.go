package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
)

// exchange is one request's metering state, carried to ModifyResponse in
// the request's context: what the request is (its endpoint, ask), where
// it goes (dest), what it was charged and settled (tally), and its trip
// upstream and back to its client (upstream, rec, delivery), with what
// its trace span and access log line say.
type exchange struct {
	live *Live // the configuration the request started under
	res  classify.Result
	// endpoint is the request resolved against the provider table: its
	// route (ex.rt) and dialect (ex.dialect).
	endpoint
	ask  asked
	dest destination
	// tally is what it was charged and settled.
	tally charges
	// upload is the body of a batch or upload request passing through.
	upload upload
	// rec writes every answer to the client and records the request's
	// outcome, counted once when ServeHTTP ends (records.count).
	rec *recorder
	// upstream is the request's trip upstream (upstreamTrip).
	upstream upstreamTrip
	// delivery follows a metered stream's terminal event to the client
	// (delivery.go).
	delivery delivery
	// trace is what its trace span says (tracing.go).
	trace exchangeTrace
	// access is what its access log line says (accessrecord.go).
	access accessState
}

// asked is what an exchange's request asks of admission, as prepare read
// it: its model, estimates and charge.
type asked struct {
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
}

// destination is where an exchange's request goes: its account, pool and
// tier.
type destination struct {
	// pool is the admission pool the request draws on at account: quota's
	// to pick (Admitter.PoolAt before admission, the Lease's after it);
	// "" is the account's own.
	// pooled says it was resolved: until then metrics say "none".
	pool   string
	pooled bool
	// account is the account the request goes to (accounts.of): ""
	// for the one account of a configuration without upstream.accounts.
	// labels are account's and pool's as metrics name them, computed
	// when either changes (at) rather than on each count. in is the
	// caller's request as the proxy received it, from which spill
	// rebuilds the URL for another account.
	account string
	labels  quota.Labels
	in      *http.Request
	// spent says the request spent this account (the proxy's own key, or
	// a configured caller's): only then may its response's rate-limit
	// headers move the account's state.
	spent bool
	// flex is set when meterproxy sent the request at the flex tier
	// (prepare; flexretry.go), and tier is the tier its budgets reserve
	// at (quota.Flex.Tier): "" otherwise.
	flex *flexSend
	tier string
	// noQuota is set when the account's last answer was Gemini's 429
	// saying its tier has no quota for the model (geminilimit.go): nil
	// otherwise.
	noQuota *ratelimit.GoogleLimit
}

// charges are what an exchange's request was charged, and settle.
type charges struct {
	lease *quota.Lease
	// batch is a batch creation's reservation (batchcreate.go).
	batch *gate.BatchHold
	// usage is what its lease is settled to (settledBy), held here
	// rather than made apart.
	usage quota.Usage
}

// upload is the body of a batch or upload request passing through, and
// its meter when it is a file for batches (batchupload.go).
type upload struct {
	body  *streamedBody
	meter *uploadMeter
}

// exchangeTrace is an exchange's trace span (or the socket turn's), nil
// with tracing off, and its upstream attempts, for the spans and the
// access log (tracing.go).
type exchangeTrace struct {
	span  trace.Span
	tried attempts
}

// flexUnavailable says the answer is flex's 429 Resource Unavailable,
// passed on (flexSend.unavailable); ex may be nil.
func (ex *exchange) flexUnavailable() bool {
	return ex != nil && ex.dest.flex != nil && ex.dest.flex.unavailable
}

// at says the request goes to pool of account, and labels it so.
func (ex *exchange) at(account, pool string) {
	ex.dest.account, ex.dest.pool, ex.dest.labels = account, pool, quota.LabelsOf(account, pool)
}

// admitted says the request holds lease, and goes to the account and
// pool quota admitted it at.
func (ex *exchange) admitted(lease *quota.Lease) {
	ex.tally.lease = lease
	ex.at(lease.Account(), lease.Pool())
}

// poolLabels are the exchange's account and pool as metrics label them
// (noPool until its pool is known); ex may be nil.
func (ex *exchange) poolLabels() quota.Labels {
	if ex == nil || !ex.dest.pooled {
		return noPool
	}
	return ex.dest.labels
}

// stateName is the exchange's pool as /admin/state names it: "none"
// until its pool is known.
func (ex *exchange) stateName() string {
	if !ex.dest.pooled {
		return poolNone
	}
	return quota.StateName(ex.dest.account, ex.dest.pool)
}

// request is what admission is asked for the exchange. It is free of
// budgets when it generates nothing, or spends another account than this
// one (a pass-through caller's own key, destination.spent): no budget here
// counts that account's spend, so none may hold it.
func (ex *exchange) request() quota.Request {
	return quota.Request{Class: ex.res.Class, Caller: ex.res.Caller, Anonymous: ex.res.Anonymous, Tokens: ex.ask.cost,
		Model: ex.ask.model, Account: ex.dest.account, Pinned: ex.ask.socket, Accounts: ex.among, Free: !ex.rt.generates || !ex.dest.spent, Unmetered: ex.rt.unmetered(),
		CostBounds: quota.CostBounds{InputTokens: ex.ask.inputEstimate, OutputTokens: ex.ask.outputCap, Generations: ex.ask.generations,
			Tier: ex.dest.tier, HiddenInput: ex.ask.hiddenInput, LongContext: ex.ask.longContext}}
}

type exchangeKey struct{}

// exchangeCtx is a request's context carrying its exchange (exchangeOf),
// held in the exchange's trip (upstreamTrip.ctx) so that carrying it
// allocates nothing; every other value, and its cancellation, are its
// parent's.
type exchangeCtx struct {
	context.Context
	ex *exchange
}

// Value implements context.Context.
func (c *exchangeCtx) Value(key any) any {
	if _, ok := key.(exchangeKey); ok {
		return c.ex
	}
	return c.Context.Value(key)
}

// withExchange is r carrying ex, once per exchange.
func withExchange(r *http.Request, ex *exchange) *http.Request {
	ex.upstream.ctx = exchangeCtx{Context: r.Context(), ex: ex}
	return r.WithContext(&ex.upstream.ctx)
}

func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// answer is the outcome of ex's upstream exchange answered with status
// (0: no answer came), as its lease settles it: measured for the adaptive
// bound only when the request spent this account (a caller's own key's
// 429 is its account's), and not flex's lack of capacity nor Gemini's
// lack of any quota for the model, which say nothing of its load.
func (ex *exchange) answer(status int) quota.Outcome {
	return quota.Outcome{Status: status, Measured: ex.dest.spent && !ex.flexUnavailable() && ex.dest.noQuota == nil}
}

// settledBy is the usage u of ex's response as its lease is settled to
// it, cut saying it was cut short: priced; counted in tokens as its
// dialect counts them (settling); at its worst case when it cannot say
// what it cost (usageUnknown); charged to budgets only when it spent this
// account. It is held in ex (charges.usage): a later call replaces it.
func (ex *exchange) settledBy(u usage.Usage, cut bool) *quota.Usage {
	ex.tally.usage = quota.Usage{
		Priced: price.Usage{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Output: u.Output, Tier: u.Tier,
			AudioInput: u.AudioInput, AudioOutput: u.AudioOutput},
		Tokens: ex.ask.settle.of(u), Settles: ex.ask.settle != settleNone, Estimated: u.Estimated,
		Worst: usageUnknown(ex, u, cut), Charged: ex.dest.spent,
	}
	return &ex.tally.usage
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
	return ex.rt.unmetered() || u.Estimated && (ex.ask.background || cut)
}

// refuse answers ex's request with f in the shape of its API, and marks
// it refused for its reason, or negotiated for a negotiation (counted when
// ServeHTTP ends).
func (ex *exchange) refuse(f refusal) {
	if f.negotiation {
		ex.rec.negotiated = f.reason
	} else {
		ex.rec.refuse(f.reason)
	}
	f.write(ex.rec, ex.errorShape())
}

// cutBy records who cut ex's answer short: side (client, upstream), or
// meterproxy when it cut the client off itself (recorder.cutFor).
func (ex *exchange) cutBy(side string) {
	if ex.rec != nil && ex.rec.cutFor() != "" {
		side = cutByMeterproxy
	}
	ex.access.cut = side
}
