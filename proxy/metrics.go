package proxy

import (
	"strconv"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"slices"

	"github.com/meterproxy/meterproxy/classify"
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
// (others are "unknown"), outcome, code class.
type metrics struct {
	requests   *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	admissions *prometheus.CounterVec
	// callerAdmissions and callerWaiting are each caller's share of a
	// class: admitted, and waiting now.
	callerAdmissions *prometheus.CounterVec
	callerWaiting    *prometheus.GaugeVec
	queueWait        *prometheus.HistogramVec
	upstream         *prometheus.HistogramVec
	cutShort         *prometheus.CounterVec
	tokens           *prometheus.CounterVec
	upstream429      prometheus.Counter
	// upstreamState holds the last known limit, remaining and reset (s)
	// the upstream reported, by kind (requests, tokens).
	upstreamState *prometheus.GaugeVec
	// little measures in flight by Little's law, by class.
	little [classify.NumClasses]*littleMeter
	shadow *prometheus.CounterVec
}

var codeClasses = []string{"2xx", "3xx", "4xx", "5xx", "none"}

// The admission families (queues, in flight, windows, the store) are
// quota's: it registers them itself.
func newMetrics(reg prometheus.Registerer, pools, callers []string, bodies *memBudget) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_requests_total",
			Help: "Requests by class, caller, outcome (forwarded, refused, cancelled) and status code class.",
		}, []string{"class", "caller", "outcome", "code"}),
		refusals: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_refusals_total",
			Help: "Requests meterproxy answered itself, by pool (none: before the request's model was known), class and reason.",
		}, []string{"pool", "class", "reason"}),
		admissions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_admissions_total",
			Help: "Admission decisions by pool (none for batch and upload), class and outcome (admitted, held, refused, cancelled, batch, upload).",
		}, []string{"pool", "class", "outcome"}),
		callerAdmissions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_caller_admissions_total",
			Help: "Requests admitted (at once or after waiting), by pool, class and caller (configured names; every unknown caller as unknown): each caller's share of its class.",
		}, []string{"pool", "class", "caller"}),
		callerWaiting: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meterproxy_caller_waiting",
			Help: "Requests waiting for admission on this replica, by pool, class and caller (configured names; every unknown caller as unknown).",
		}, []string{"pool", "class", "caller"}),
		queueWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meterproxy_queue_wait_seconds",
			Help: "Time from arrival to admission decision, by class and outcome: admitted, or refused (queue full, max_wait, a cap, the store, shutdown); a client that left is in neither.",
			// Refusals at max_wait are apart, so they never pull the
			// admitted quantiles up to the bucket past max_wait.
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
		}, []string{"class", "outcome"}),
		upstream: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meterproxy_upstream_duration_seconds",
			Help:    "Upstream service time, from admission to the end of the response, by class.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"class"}),
		tokens: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_tokens_total",
			Help: "Tokens of successful responses by pool, class, caller, kind (input, output) and whether they are an estimate (no usage in the response, or cut short).",
		}, []string{"pool", "class", "caller", "kind", "estimated"}),
		shadow: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_shadow_decisions_total",
			Help: "In mode: shadow, what admission would have decided for requests forwarded at once, by class and outcome.",
		}, []string{"class", "outcome"}),
		upstream429: f.NewCounter(prometheus.CounterOpts{
			Name: "meterproxy_upstream_429_total",
			Help: "Responses in which the upstream itself answered 429.",
		}),
		upstreamState: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meterproxy_upstream_ratelimit",
			Help: "The upstream's last reported state of a pool's bucket, by pool, kind (requests, tokens) and field (limit, remaining, reset_seconds).",
		}, []string{"pool", "kind", "field"}),
		cutShort: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_responses_cut_short_total",
			Help: "Forwarded responses whose body did not reach the client whole, by class and side that failed (client, upstream).",
		}, []string{"class", "side"}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_body_memory_bytes",
		Help: "Bytes of request bodies held in memory now (held requests' included), out of server.max_body_memory_bytes.",
	}, func() float64 { return float64(bodies.inUse()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_body_memory_limit_bytes",
		Help: "server.max_body_memory_bytes: past it a request gets 503 body_memory_exhausted.",
	}, func() float64 { return float64(bodies.limit) })
	for _, c := range classify.Classes {
		class := c.String()
		m.little[c] = &littleMeter{now: time.Now}
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "meterproxy_measured_in_flight",
			Help:        "Requests genuinely in flight by Little's law, by class: upstream service time completed in the last 10 s ÷ 10 s (throughput × mean service time).",
			ConstLabels: prometheus.Labels{"class": class},
		}, m.little[c].value)
	}
	m.preinitAll(pools, callers)
	return m
}

// preinitAll creates the series of every pool and caller; a reload calls
// it again for those it added.
func (m *metrics) preinitAll(pools, callers []string) {
	for _, c := range classify.Classes {
		m.preinit(c.String(), slices.Concat(pools, []string{poolNone}), callers)
	}
}

// poolNone labels what happened to a request before its pool was known:
// refused at the front door or while its body was read, or a batch or
// upload, which no pool admits.
const poolNone = "none"

// preinit creates every label combination so series exist from the start.
func (m *metrics) preinit(class string, pools, callers []string) {
	for _, caller := range slices.Concat(callers, []string{classify.UnknownCaller}) {
		for _, code := range codeClasses {
			m.requests.WithLabelValues(class, caller, outcomeForwarded, code)
		}
		m.requests.WithLabelValues(class, caller, outcomeRefused, "4xx")
		m.requests.WithLabelValues(class, caller, outcomeRefused, "5xx")
		m.requests.WithLabelValues(class, caller, outcomeCancelled, "none")
	}
	for _, pool := range pools {
		for _, r := range refusalReasons {
			m.refusals.WithLabelValues(pool, class, r)
		}
		for _, o := range []string{admitAdmitted, admitHeld, admitRefused, admitCancelled, admitBatch, admitUpload} {
			m.admissions.WithLabelValues(pool, class, o)
		}
		for _, caller := range slices.Concat(callers, []string{classify.UnknownCaller}) {
			m.callerAdmissions.WithLabelValues(pool, class, caller)
			m.callerWaiting.WithLabelValues(pool, class, caller)
			for _, kind := range []string{"input", "output"} {
				m.tokens.WithLabelValues(pool, class, caller, kind, "false")
				m.tokens.WithLabelValues(pool, class, caller, kind, "true")
			}
		}
	}
	m.queueWait.WithLabelValues(class, waitAdmitted)
	m.queueWait.WithLabelValues(class, waitRefused)
	m.upstream.WithLabelValues(class)
	for _, o := range shadowOutcomes {
		m.shadow.WithLabelValues(class, o)
	}
	m.cutShort.WithLabelValues(class, "client")
	m.cutShort.WithLabelValues(class, "upstream")
}

// codeClass maps a status to its label: "2xx" … "5xx".
func codeClass(status int) string {
	switch {
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 300 && status < 400:
		return "3xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500 && status < 600:
		return "5xx"
	default:
		return "none"
	}
}

// countTokens adds one response's usage to pool's count.
func (m *metrics) countTokens(pool string, res classify.Result, u usage.Usage) {
	class, est := res.Class.String(), strconv.FormatBool(u.Estimated)
	m.tokens.WithLabelValues(pool, class, res.Caller, "input", est).Add(float64(u.Input))
	m.tokens.WithLabelValues(pool, class, res.Caller, "output", est).Add(float64(u.Output))
}

// observeUpstream records what the upstream reported of pool's buckets;
// unknown fields leave the last known value.
func (m *metrics) observeUpstream(pool string, o ratelimit.Observation) {
	for _, k := range []struct {
		kind string
		w    ratelimit.Bucket
	}{{"requests", o.Requests}, {"tokens", o.Tokens}} {
		if !k.w.Known() {
			continue
		}
		m.upstreamState.WithLabelValues(pool, k.kind, "limit").Set(float64(k.w.Limit))
		m.upstreamState.WithLabelValues(pool, k.kind, "remaining").Set(float64(k.w.Remaining))
		if k.w.Reset >= 0 {
			m.upstreamState.WithLabelValues(pool, k.kind, "reset_seconds").Set(k.w.Reset.Seconds())
		}
	}
}
