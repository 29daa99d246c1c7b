package proxy

import (
	"strconv"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"slices"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The request outcomes: every request ends as exactly one of these.
const (
	outcomeForwarded = "forwarded" // the upstream answered (any status)
	outcomeRefused   = "refused"   // meterproxy answered with an error body
	outcomeCancelled = "cancelled" // the client left before an answer began
)

// The admission outcomes of meterproxy_admissions_total.
const (
	admitAdmitted  = "admitted"  // granted by the first store call
	admitHeld      = "held"      // granted after waiting for a window or slot
	admitRefused   = "refused"   // queue full or max_wait (see refusals)
	admitCancelled = "cancelled" // the client left while waiting
	admitBatch     = "batch"     // a batch endpoint: the provider's separate quota, not charged
	admitUpload    = "upload"    // a file upload: not charged, the body streams through
)

// The outcomes of meterproxy_queue_wait_seconds.
const (
	waitAdmitted = "admitted"
	waitRefused  = "refused"
)

// metrics holds every collector of the proxy, registered on one injected
// registry. Label values are closed sets: class, configured caller names
// (others are "unknown"), outcome, status code (100–599 or none), and a
// pool's account and pool (quota.Labels: configured names, "default" and
// "none").
type metrics struct {
	// outcomes count how requests ended; admission its decisions; spent
	// what answers used and cost; upstream the upstream's side.
	outcomes  outcomeMetrics
	admission admissionMetrics
	spent     spendMetrics
	upstream  upstreamMetrics
	// sockets are the socket layer's (socketset.go); realtime the
	// Realtime sessions' (realtimesessions.go).
	sockets  socketMetrics
	realtime realtimeMetrics
	// accessDropped counts access log lines dropped (accesslog.go).
	accessDropped prometheus.Counter
}

// outcomeMetrics count how requests ended.
type outcomeMetrics struct {
	requests *prometheus.CounterVec
	refusals *prometheus.CounterVec
	// negotiations counts the front door's negotiations (negotiation.go),
	// by reason.
	negotiations *prometheus.CounterVec
	cutShort     *prometheus.CounterVec
	// background counts answered Responses requests with background:
	// true, by class: generating after the answer, holding no slot.
	background *prometheus.CounterVec
	shadow     *prometheus.CounterVec
}

// admissionMetrics count admission's decisions and what waits for and
// holds them.
type admissionMetrics struct {
	admissions *prometheus.CounterVec
	// callerAdmissions and callerWaiting are each caller's share of a
	// class: admitted, and waiting now.
	callerAdmissions *prometheus.CounterVec
	callerWaiting    *prometheus.GaugeVec
	// callerInFlight counts each caller's admitted requests on this
	// replica between admission and the end of the response.
	callerInFlight *prometheus.GaugeVec
	queueWait      *prometheus.HistogramVec
	// little measures in flight by Little's law, by class.
	little [classify.NumClasses]*littleMeter
}

// spendMetrics count what answers used and cost.
type spendMetrics struct {
	tokens *prometheus.CounterVec
	// spend is what responses cost in dollars; unpriced counts those no
	// price matched (quota prices them).
	spend, unpriced *prometheus.CounterVec
}

// upstreamMetrics are the upstream's side: how long it took, what it
// reported of its limits, and the requests moved for its sake.
type upstreamMetrics struct {
	duration    *prometheus.HistogramVec
	upstream429 prometheus.Counter
	// flexRetries counts flex requests retried for want of flex
	// capacity, by account and pool (flexretry.go).
	flexRetries *prometheus.CounterVec
	// spills counts requests moved to another account after a 429 or a
	// failed connection, by the account they left (spill.go).
	spills *prometheus.CounterVec
	// upstreamLimit, upstreamRemaining and upstreamReset hold the last
	// limit, remaining and reset (s) the upstream reported, by account,
	// pool and kind (requests, tokens).
	upstreamLimit, upstreamRemaining, upstreamReset *prometheus.GaugeVec
}

// The admission families (queues, in flight, windows, the store) are
// quota's: it registers them itself.
func newMetrics(reg prometheus.Registerer, pools []quota.Labels, callers []string, bodies *memBudget) *metrics {
	f := promauto.With(reg)
	m := &metrics{}
	m.outcomes.requests = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_requests_total",
		Help: "Requests by class, caller, outcome (forwarded, refused, cancelled) and status code (none: the client left before any answer).",
	}, []string{"class", "caller", "outcome", "code"})
	m.outcomes.refusals = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_refusals_total",
		Help: "Requests meterproxy answered itself, by account and pool (both none: before the request's model was known), class and reason.",
	}, []string{"account", "pool", "class", "reason"})
	m.outcomes.negotiations = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_negotiations_total",
		Help: "Front-door answers that are protocol negotiation, not refusals of a request: an upgrade meterproxy does not meter, answered 426 (upgrade_required); a HEAD or GET without a configured key on a path no provider API has, answered 404 (not_an_api). Counted in neither meterproxy_requests_total nor meterproxy_refusals_total.",
	}, []string{"reason"})
	m.admission.admissions = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_admissions_total",
		Help: "Admission decisions by account and pool (both none for batch and upload), class and outcome (admitted, held, refused, cancelled, batch, upload).",
	}, []string{"account", "pool", "class", "outcome"})
	m.admission.callerAdmissions = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_caller_admissions_total",
		Help: "Requests admitted (at once or after waiting), by the account and pool that admitted them, class and caller (configured names; every unknown caller as unknown): each caller's share of its class.",
	}, []string{"account", "pool", "class", "caller"})
	m.admission.callerWaiting = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meterproxy_caller_waiting",
		Help: "Requests waiting for admission on this replica, by account and pool (the first the request may go to), class and caller (configured names; every unknown caller as unknown).",
	}, []string{"account", "pool", "class", "caller"})
	m.admission.callerInFlight = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meterproxy_caller_in_flight",
		Help: "Admitted requests upstream on this replica now, by caller (configured names; every unknown caller as unknown); summed over replicas, the fleet's.",
	}, []string{"caller"})
	m.admission.queueWait = f.NewHistogramVec(prometheus.HistogramOpts{
		Name: "meterproxy_queue_wait_seconds",
		Help: "Time from arrival to admission decision, by account and pool (admitted: where it was admitted; refused: the first it could go to), class and outcome: admitted, or refused (queue full, max_wait, a cap, the store, shutdown); a client that left is in neither.",
		// Refusals at max_wait are apart, so they never pull the
		// admitted quantiles up to the bucket past max_wait.
		Buckets: []float64{.0005, .001, .005, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
	}, []string{"account", "pool", "class", "outcome"})
	m.upstream.duration = f.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meterproxy_upstream_duration_seconds",
		Help:    "Upstream service time, from sending the request to the end of the upstream's answer (not the client's reading of it), by the account and pool that served it (both none for batches and uploads) and class.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300},
	}, []string{"account", "pool", "class"})
	m.spent.tokens = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_tokens_total",
		Help: "Tokens of successful responses by account, pool, class, caller, kind (input, output) and whether they are an estimate (no usage in the response, or cut short).",
	}, []string{"account", "pool", "class", "caller", "kind", "estimated"})
	m.spent.spend = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_spend_usd_total",
		Help: "What successful responses cost in US dollars — their usage at the prices entry matching their model, at the service tier the response names — by account, pool, class, caller (configured names; every unknown caller as unknown) and whether the usage is an estimate (no usage in the response, or cut short).",
	}, []string{"account", "pool", "class", "caller", "estimated"})
	m.spent.unpriced = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_unpriced_requests_total",
		Help: "Successful responses whose model no prices entry matches (counted at $0 in meterproxy_spend_usd_total), by account and pool.",
	}, []string{"account", "pool"})
	m.outcomes.background = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_background_responses_total",
		Help: "Responses API requests with background: true answered 2xx, by class: the provider generates after the answer, so they hold no in-flight slot while it does and keep their admission charge.",
	}, []string{"class"})
	m.outcomes.shadow = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_shadow_decisions_total",
		Help: "In mode: shadow, what admission would have decided for requests forwarded at once, by class and outcome.",
	}, []string{"class", "outcome"})
	m.upstream.upstream429 = f.NewCounter(prometheus.CounterOpts{
		Name: "meterproxy_upstream_429_total",
		Help: "Responses in which the upstream itself answered 429.",
	})
	m.upstream.spills = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_account_spills_total",
		Help: "Requests an account answered 429, or no connection to it could be made for, moved to another account their class may go to (upstream.accounts), by the account they left; the 429 or 502 did not reach the caller.",
	}, []string{"account"})
	m.upstream.flexRetries = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_flex_retries_total",
		Help: "Requests sent at the flex tier retried after the upstream's 429 Resource Unavailable (no flex capacity), by account and pool; not in meterproxy_upstream_429_total.",
	}, []string{"account", "pool"})
	m.upstream.upstreamLimit = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meterproxy_upstream_limit",
		Help: "The upstream's last reported limit of a pool's bucket (per minute), by account, pool and kind (requests, tokens).",
	}, []string{"account", "pool", "kind"})
	m.upstream.upstreamRemaining = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meterproxy_upstream_remaining",
		Help: "The upstream's last reported remaining of a pool's bucket, by account, pool and kind (requests, tokens).",
	}, []string{"account", "pool", "kind"})
	m.upstream.upstreamReset = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meterproxy_upstream_reset_seconds",
		Help: "The upstream's last reported time until a pool's bucket is full again, by account, pool and kind (requests, tokens).",
	}, []string{"account", "pool", "kind"})
	m.accessDropped = f.NewCounter(prometheus.CounterOpts{
		Name: "meterproxy_access_log_dropped_total",
		Help: "Access log lines dropped because the writer's queue was full (the file or stream it writes to is slower than the requests): the requests were served, and their lines lost.",
	})
	m.outcomes.cutShort = f.NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_responses_cut_short_total",
		Help: "Forwarded responses whose body did not reach the client whole, by class and side that failed (client, upstream).",
	}, []string{"class", "side"})
	m.sockets = newSocketMetrics(f)
	m.realtime = newRealtimeMetrics(f)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_body_memory_bytes",
		Help: "Bytes of request bodies held in memory now (held requests' included), and of answers read ahead of their clients, out of server.max_body_memory_bytes.",
	}, func() float64 { return float64(bodies.inUse()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_body_memory_limit_bytes",
		Help: "server.max_body_memory_bytes: past it a request gets 503 body_memory_exhausted.",
	}, func() float64 { return float64(bodies.limit) })
	for _, c := range classify.Classes {
		class := c.String()
		m.admission.little[c] = &littleMeter{now: time.Now}
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "meterproxy_measured_in_flight",
			Help:        "Requests genuinely in flight by Little's law, by class: upstream service time completed in the last 10 s ÷ 10 s (throughput × mean service time).",
			ConstLabels: prometheus.Labels{"class": class},
		}, m.admission.little[c].value)
	}
	for _, r := range negotiationCodes {
		m.outcomes.negotiations.WithLabelValues(r.reason)
	}
	m.preinitAll(pools, callers)
	return m
}

// preinitAll creates the series of every pool (by account and pool) and
// caller; a reload calls it again for those it added.
func (m *metrics) preinitAll(pools []quota.Labels, callers []string) {
	for _, c := range classify.Classes {
		m.preinit(c.String(), slices.Concat(pools, []quota.Labels{noPool}), callers)
	}
}

// noPool labels what happened to a request before its pool was known —
// refused at the front door or while its body was read, or a batch or
// upload, which no pool admits — in both the account and the pool label:
// before its pool, a request's account is not known either.
var noPool = quota.Labels{Account: poolNone, Pool: poolNone}

// poolNone is noPool's account and pool label.
const poolNone = "none"

// preinit creates every label combination so series exist from the start.
func (m *metrics) preinit(class string, pools []quota.Labels, callers []string) {
	for _, caller := range slices.Concat(callers, []string{classify.UnknownCaller}) {
		m.admission.callerInFlight.WithLabelValues(caller)
		m.realtime.sessions.WithLabelValues(class, caller)
		m.outcomes.requests.WithLabelValues(class, caller, outcomeForwarded, "200")
		m.outcomes.requests.WithLabelValues(class, caller, outcomeRefused, "429")
		m.outcomes.requests.WithLabelValues(class, caller, outcomeRefused, "503")
		m.outcomes.requests.WithLabelValues(class, caller, outcomeCancelled, "none")
	}
	for _, p := range pools {
		acct, pool := p.Account, p.Pool
		m.spent.unpriced.WithLabelValues(acct, pool)
		m.upstream.flexRetries.WithLabelValues(acct, pool)
		m.upstream.spills.WithLabelValues(acct)
		m.upstream.duration.WithLabelValues(acct, pool, class)
		if p != noPool { // every wait is at a pool
			m.admission.queueWait.WithLabelValues(acct, pool, class, waitAdmitted)
			m.admission.queueWait.WithLabelValues(acct, pool, class, waitRefused)
		}
		for _, r := range refusalCodes {
			m.outcomes.refusals.WithLabelValues(acct, pool, class, r.reason)
		}
		for _, o := range []string{admitAdmitted, admitHeld, admitRefused, admitCancelled, admitBatch, admitUpload} {
			m.admission.admissions.WithLabelValues(acct, pool, class, o)
		}
		for _, caller := range slices.Concat(callers, []string{classify.UnknownCaller}) {
			m.admission.callerAdmissions.WithLabelValues(acct, pool, class, caller)
			m.admission.callerWaiting.WithLabelValues(acct, pool, class, caller)
			for _, kind := range []string{"input", "output"} {
				m.spent.tokens.WithLabelValues(acct, pool, class, caller, kind, "false")
				m.spent.tokens.WithLabelValues(acct, pool, class, caller, kind, "true")
			}
			m.spent.spend.WithLabelValues(acct, pool, class, caller, "false")
			m.spent.spend.WithLabelValues(acct, pool, class, caller, "true")
		}
	}
	for _, o := range shadowOutcomes {
		m.outcomes.shadow.WithLabelValues(class, o)
	}
	m.outcomes.cutShort.WithLabelValues(class, "client")
	m.outcomes.cutShort.WithLabelValues(class, "upstream")
	m.outcomes.background.WithLabelValues(class)
	m.realtime.unheld.WithLabelValues(class)
}

// statusCode is a status's code label: the code itself ("200", "429"),
// as Prometheus's conventions have it; "none" outside 100–599 (a client
// that left before any answer).
func statusCode(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status)
}

// countTokens adds one response's usage to pool's count.
func (m *metrics) countTokens(pool quota.Labels, res classify.Result, u usage.Usage) {
	class, est := res.Class.String(), strconv.FormatBool(u.Estimated)
	m.spent.tokens.WithLabelValues(pool.Account, pool.Pool, class, res.Caller, "input", est).Add(float64(u.Input))
	m.spent.tokens.WithLabelValues(pool.Account, pool.Pool, class, res.Caller, "output", est).Add(float64(u.Output))
}

// countSpend counts a response's cost, or that no price matched its
// model.
func (m *metrics) countSpend(pool quota.Labels, res classify.Result, cost price.Nanodollars, priced, estimated bool) {
	if !priced {
		m.spent.unpriced.WithLabelValues(pool.Account, pool.Pool).Inc()
	}
	m.spent.spend.WithLabelValues(pool.Account, pool.Pool, res.Class.String(), res.Caller, strconv.FormatBool(estimated)).Add(cost.Dollars())
}

// observeUpstream records what the upstream reported of pool's buckets;
// unknown fields leave the last known value.
func (m *metrics) observeUpstream(pool quota.Labels, o ratelimit.Observation) {
	for _, k := range []struct {
		kind string
		w    ratelimit.Bucket
	}{{"requests", o.Requests}, {"tokens", o.Tokens}} {
		if !k.w.Known() {
			continue
		}
		m.upstream.upstreamLimit.WithLabelValues(pool.Account, pool.Pool, k.kind).Set(float64(k.w.Limit))
		m.upstream.upstreamRemaining.WithLabelValues(pool.Account, pool.Pool, k.kind).Set(float64(k.w.Remaining))
		if k.w.Reset >= 0 {
			m.upstream.upstreamReset.WithLabelValues(pool.Account, pool.Pool, k.kind).Set(k.w.Reset.Seconds())
		}
	}
}
