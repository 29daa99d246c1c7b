package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// metering is the part of the handler that admits a request and settles
// its answer, an HTTP request's and a socket turn's alike: what admission
// is asked (prepare, flexFor), the admission (admitExchange, or in mode
// shadow a shadow decision: shadows, shadow.go), and what the upstream's answer settles, counts and
// says of the account (settlement.go). Safe for concurrent use.
type metering struct {
	shared
	// last is the provider's last report, for /admin/state.
	last lastReport
	// maxHold is upstream.max_hold: no answer holds bulk longer.
	maxHold time.Duration
	// shadows are mode shadow's decisions under way.
	shadows *shadows
}

// prepare reads what admission needs of a metered request's body (its
// headers hdr) into
// ex — its input estimate, pool and token charge — from one walk of it
// (readFields), and returns the payload to forward (with stream usage
// injected when configured); a refusal when the body is refused, before
// anything is admitted. The charge is what the provider would charge,
// always: whether the request's pool charges tokens is quota's to decide.
// A request quota sends at the flex tier (flexFor) gets service_tier
// "flex" unless it names a tier itself.
func (mt *metering) prepare(hdr http.Header, ex *exchange, body *body) ([]byte, *refusal) {
	payload := body.Bytes()
	fields, bad := readFields(hdr.Get("Content-Type"), payload)
	if bad != nil {
		return nil, bad
	}
	ex.access.bytesIn, ex.access.stream = int64(len(payload)), fields.Stream || ex.ask.socket // as the client sent it
	// Only a stream can want its usage injected: a plain request is not
	// walked again for it.
	if ex.live.InjectStreamUsage && ex.rt.api == usage.ChatCompletions && fields.Stream {
		if payload, ex.ask.injected = usage.InjectStreamUsage(payload); ex.ask.injected {
			body.charge(int64(cap(payload)))
		}
	}
	ex.ask.inputEstimate = usage.EstimateInput(payload)
	ex.ask.background = ex.rt.api == usage.Responses && fields.Background
	ex.ask.hiddenInput, ex.ask.longContext = fields.HiddenInput, ex.rt.api == usage.Messages && longContext(hdr)
	ex.ask.model, ex.ask.outputCap, ex.ask.generations = modelOf(ex.rt, fields), fields.OutputCeiling(), fields.Generations
	home := mt.admitter.HomeAccount(ex.res.Class, ex.among) // until admission says where it goes
	ex.at(home, mt.admitter.PoolAt(home, func() quota.Model { return ex.ask.model }))
	ex.dest.pooled = true
	ex.ask.cost, ex.ask.settle = ex.dialect.charge(ex.ask.inputEstimate, fields)
	if f, ok := mt.flexFor(ex); ok {
		if out, injected := usage.InjectServiceTier(payload, price.TierFlex); injected {
			ex.dest.flex, ex.dest.tier = &flexSend{plain: payload, fallback: f.Fallback}, f.Tier
			body.charge(int64(cap(out)))
			payload = out
		}
	}
	mt.tr.prepared(ex)
	return payload, nil
}

// flexFor says whether ex's request is sent at the flex tier, and how.
// Which requests are is quota's to decide, by class and model
// (quota.Config.FlexFor); the proxy only says which requests can carry
// a tier (flexCarried), and asks quota of those.
func (mt *metering) flexFor(ex *exchange) (quota.Flex, bool) {
	if !flexCarried(ex) {
		return quota.Flex{}, false
	}
	return mt.admitter.FlexFor(ex.res.Class, func() quota.Model { return ex.ask.model })
}

// admitExchange waits for ex's admission (quota.Admitter.Admit) while ctx
// lasts and counts its decision; start is when the request arrived, api
// its method and path as a refusal names them. It returns the lease, or
// the refusal to answer with — none when ctx ended first (the client
// left: cancelled). HTTP requests (admit) and socket turns
// (socketturn.go) are admitted by it alike.
func (mt *metering) admitExchange(ctx context.Context, ex *exchange, start time.Time, api apiName) (*quota.Lease, *refusal) {
	res := ex.res
	class, pool := res.Class.String(), ex.poolLabels()
	waiting := mt.m.admission.callerWaiting.WithLabelValues(pool.Account, pool.Pool, class, res.Caller)
	waiting.Inc()
	span := mt.tr.startAdmission(ex, start)
	lease, err := mt.admitter.Admit(ctx, ex.request())
	waiting.Dec()
	end := time.Now()
	ex.access.waited = end.Sub(start)
	wait := ex.access.waited.Seconds()
	if err == nil {
		admitted(span, lease, end)
		outcome := admitAdmitted
		if lease.Held() {
			outcome = admitHeld
		}
		at := quota.LabelsOf(lease.Account(), lease.Pool()) // where it was admitted: maybe not the account it waited at first
		mt.m.admission.queueWait.WithLabelValues(at.Account, at.Pool, class, waitAdmitted).Observe(wait)
		mt.m.admission.admissions.WithLabelValues(at.Account, at.Pool, class, outcome).Inc()
		mt.m.admission.callerAdmissions.WithLabelValues(at.Account, at.Pool, class, res.Caller).Inc()
		return lease, nil
	}
	f, decided := reasonOf(err, res.Class, api)
	switch {
	case !decided && ctx.Err() != nil: // the client left first
		mt.m.admission.admissions.WithLabelValues(pool.Account, pool.Pool, class, admitCancelled).Inc()
		notAdmitted(span, err, nil, end)
		return nil, nil
	case ctx.Err() == nil && f.reason != reasonChargeTooLarge: // a charge too large is refused before it waits
		mt.m.admission.queueWait.WithLabelValues(pool.Account, pool.Pool, class, waitRefused).Observe(wait)
	}
	mt.m.admission.admissions.WithLabelValues(pool.Account, pool.Pool, class, admitRefused).Inc()
	notAdmitted(span, err, &f, end)
	return nil, &f
}
