package proxy

import (
	"slices"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
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
)

// metrics holds every collector of the proxy, registered on one injected
// registry. Label values are closed sets: class, configured caller names
// (others are "unknown"), outcome, code class.
type metrics struct {
	requests   *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	admissions *prometheus.CounterVec
	queueWait  *prometheus.HistogramVec
	upstream   *prometheus.HistogramVec
	cutShort   *prometheus.CounterVec
}

var codeClasses = []string{"2xx", "3xx", "4xx", "5xx", "none"}

func newMetrics(reg prometheus.Registerer, callers []string, lim *quota.Limiter, store StoreStatus, inFlightBound int64) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_requests_total",
			Help: "Requests by class, caller, outcome (forwarded, refused, cancelled) and status code class.",
		}, []string{"class", "caller", "outcome", "code"}),
		refusals: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_refusals_total",
			Help: "Requests meterproxy answered itself, by class and reason.",
		}, []string{"class", "reason"}),
		admissions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_admissions_total",
			Help: "Admission decisions by class and outcome (admitted, held, refused, cancelled).",
		}, []string{"class", "outcome"}),
		queueWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meterproxy_queue_wait_seconds",
			Help:    "Time from arrival to admission decision, by class.",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
		}, []string{"class"}),
		upstream: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meterproxy_upstream_duration_seconds",
			Help:    "Upstream service time, from admission to the end of the response, by class.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"class"}),
		cutShort: f.NewCounterVec(prometheus.CounterOpts{
			Name: "meterproxy_responses_cut_short_total",
			Help: "Forwarded responses whose body did not reach the client whole, by class and side that failed (client, upstream).",
		}, []string{"class", "side"}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_in_flight_limit",
		Help: "The in-flight bound the store enforces: the fleet's with Redis, this replica's in process.",
	}, func() float64 { return float64(inFlightBound) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_store_degraded",
		Help: "1 while the shared store (Redis) is bypassed after a failure and store.on_error applies, else 0.",
	}, func() float64 {
		if store != nil && store.Degraded() {
			return 1
		}
		return 0
	})
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "meterproxy_store_errors_total",
		Help: "Failed calls to the shared store (Redis), probes included.",
	}, func() float64 {
		if store == nil {
			return 0
		}
		return float64(store.Failures())
	})
	for _, c := range classify.Classes {
		class := c.String()
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_queue_depth", Help: "Requests waiting for admission, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(lim.Queued(c)) })
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_in_flight", Help: "Requests admitted by this replica and not yet finished, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(lim.InFlight(c)) })
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_fleet_in_flight", Help: "Requests in flight across the fleet at the store's last answer, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(lim.FleetInFlight(c)) })
		m.preinit(class, callers)
	}
	return m
}

// preinit creates every label combination so series exist from the start.
func (m *metrics) preinit(class string, callers []string) {
	for _, caller := range slices.Concat(callers, []string{classify.UnknownCaller}) {
		for _, code := range codeClasses {
			m.requests.WithLabelValues(class, caller, outcomeForwarded, code)
		}
		m.requests.WithLabelValues(class, caller, outcomeRefused, "4xx")
		m.requests.WithLabelValues(class, caller, outcomeRefused, "5xx")
		m.requests.WithLabelValues(class, caller, outcomeCancelled, "none")
	}
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(class, r)
	}
	for _, o := range []string{admitAdmitted, admitHeld, admitRefused, admitCancelled} {
		m.admissions.WithLabelValues(class, o)
	}
	m.queueWait.WithLabelValues(class)
	m.upstream.WithLabelValues(class)
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
