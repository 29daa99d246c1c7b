package quota

import (
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// registerMetrics registers the families admission owns on reg: queues, in
// flight, the window's use, the upstream hold, the store's health and
// latency, and the capped callers' numbers. Gauges read the Admitter at
// scrape time, so a reload's new limits show at once.
func registerMetrics(reg prometheus.Registerer, a *Admitter) {
	f := promauto.With(reg)
	reg.MustRegister(newCapCollector(a))
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_in_flight_limit",
		Help: "The in-flight bound the store enforces: the fleet's with Redis, this replica's in process.",
	}, func() float64 { return float64(a.InFlightLimit()) })
	storeCalls := f.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meterproxy_store_call_duration_seconds",
		Help:    "Duration of admission calls to the quota store (one Redis script call each), by result (ok, error).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	}, []string{"result"})
	okCalls, errCalls := storeCalls.WithLabelValues("ok"), storeCalls.WithLabelValues("error")
	a.onStoreCall = func(d time.Duration, err error) {
		if err != nil {
			errCalls.Observe(d.Seconds())
			return
		}
		okCalls.Observe(d.Seconds())
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_upstream_hold_seconds",
		Help: "How much longer bulk is held on the upstream's word (remaining below the interactive reserve, or a 429), as of the store's last answer.",
	}, func() float64 { return a.limiter.UpstreamHold().Seconds() })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meterproxy_store_degraded",
		Help: "1 while the shared store (Redis) is bypassed after a failure and store.on_error applies, else 0.",
	}, func() float64 {
		if a.backend.Degraded() {
			return 1
		}
		return 0
	})
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "meterproxy_store_errors_total",
		Help: "Failed calls to the shared store (Redis), probes included.",
	}, func() float64 { return float64(a.backend.Failures()) })
	for _, c := range classify.Classes {
		class := c.String()
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_queue_depth", Help: "Requests waiting for admission, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(a.limiter.Queued(c)) })
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_in_flight", Help: "Requests admitted by this replica and not yet finished, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(a.limiter.InFlight(c)) })
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meterproxy_fleet_in_flight", Help: "Requests in flight across the fleet at the store's last answer, by class.",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(a.limiter.FleetInFlight(c)) })
		for _, unit := range []string{"requests", "tokens"} {
			f.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "meterproxy_window_used", Help: "What the class used of the current one-second window (fleet-wide with Redis), by unit, as of the store's last answer.",
				ConstLabels: prometheus.Labels{"class": class, "unit": unit},
			}, func() float64 {
				w := a.limiter.Window()
				if unit == "tokens" {
					return float64(w.Tokens[c])
				}
				return float64(w.Requests[c])
			})
		}
	}
}

// capCollector exports the capped callers' numbers at scrape time. The set
// of capped callers changes with reloads, so it is an unchecked collector:
// Describe sends nothing.
type capCollector struct {
	a                *Admitter
	queued, inFlight *prometheus.Desc
	limit, rateLimit *prometheus.Desc
}

func newCapCollector(a *Admitter) *capCollector {
	label := []string{"caller"}
	return &capCollector{
		a: a,
		queued: prometheus.NewDesc("meterproxy_caller_queue_depth",
			"Requests of a capped caller waiting on this replica, by caller.", label, nil),
		inFlight: prometheus.NewDesc("meterproxy_caller_in_flight",
			"Requests in flight under a capped caller's cap across the fleet, at the store's last answer, by caller.", label, nil),
		limit: prometheus.NewDesc("meterproxy_caller_in_flight_limit",
			"A capped caller's callers[].max_in_flight (0: no in-flight cap), by caller.", label, nil),
		rateLimit: prometheus.NewDesc("meterproxy_caller_requests_per_minute_limit",
			"A capped caller's callers[].requests_per_minute (0: no rate cap), by caller.", label, nil),
	}
}

// Describe implements prometheus.Collector; see capCollector.
func (c *capCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *capCollector) Collect(ch chan<- prometheus.Metric) {
	for name, st := range c.a.limiter.capState() {
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(st.Queued), name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.FleetInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.MaxInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.rateLimit, prometheus.GaugeValue, float64(st.RequestsPerMinute), name)
	}
}
