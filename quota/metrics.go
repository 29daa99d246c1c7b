package quota

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// registerMetrics registers the families admission owns on reg: queues, in
// flight, the window's use, the upstream hold, the store's health and
// latency, and the capped callers' numbers. Gauges read the Admitter at
// scrape time, so a reload's new limits show at once.
func registerMetrics(reg prometheus.Registerer, a *Admitter) {
	f := promauto.With(reg)
	reg.MustRegister(newCapCollector(a))
	reg.MustRegister(newPoolCollector(a))
	reg.MustRegister(newAdaptiveCollector(a))
	reg.MustRegister(gate.NewBudgetCollector(a.budgets))
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
}

// poolCollector exports every pool's numbers at scrape time, by account
// and pool (Labels: the config's names, so both labels are bounded by it)
// and class: queues, in flight, the window's use, the
// in-flight bound and the upstream hold. Pools come and go with reloads;
// the families do not.
type poolCollector struct {
	a                          *Admitter
	queued, inFlight, fleet    *prometheus.Desc
	usedRequests, usedTokens   *prometheus.Desc
	limitRequests, limitTokens *prometheus.Desc
	limit, hold                *prometheus.Desc
}

func newPoolCollector(a *Admitter) *poolCollector {
	pc, ap := []string{"account", "pool", "class"}, []string{"account", "pool"}
	pcm := []string{"account", "pool", "class", "mode"} // counted by admission's decisions: shadow's in mode shadow
	return &poolCollector{
		a: a,
		queued: prometheus.NewDesc("meterproxy_queue_depth",
			"Requests waiting for admission, by account, pool, class and mode (shadow: mode shadow's simulated decisions, which no request waits for; enforce).", pcm, nil),
		inFlight: prometheus.NewDesc("meterproxy_in_flight",
			"Requests admitted by this replica and not yet finished, by account, pool, class and mode (as meterproxy_queue_depth).", pcm, nil),
		fleet: prometheus.NewDesc("meterproxy_fleet_in_flight",
			"Requests in flight across the fleet, by account, pool and class: this replica's own now and the others' as they last told the store, slots taken ahead of demand (credits) left out; mode as meterproxy_queue_depth (this replica's).", pcm, nil),
		usedRequests: prometheus.NewDesc("meterproxy_window_used_requests",
			"Requests the class was granted in the pool's current one-second window (fleet-wide with Redis), as of the store's last answer; mode as meterproxy_queue_depth.", pcm, nil),
		usedTokens: prometheus.NewDesc("meterproxy_window_used_tokens",
			"Tokens the class was charged in the pool's current one-second window (fleet-wide with Redis), as of the store's last answer; mode as meterproxy_queue_depth.", pcm, nil),
		limitRequests: prometheus.NewDesc("meterproxy_limit_requests_per_second",
			"The most the class may take of the pool in a second, as configured and enforced (fleet-wide with Redis): the account's allowance for interactive; for bulk its share, or all but the interactive reserve while it may borrow.", pc, nil),
		limitTokens: prometheus.NewDesc("meterproxy_limit_tokens_per_second",
			"As meterproxy_limit_requests_per_second, in tokens; only for a pool that enforces tokens_per_minute.", pc, nil),
		limit: prometheus.NewDesc("meterproxy_in_flight_limit",
			"The in-flight bound admission works under now, by account and pool: the fleet's with Redis; this replica's own in process, and while Redis is bypassed under store.on_error local.", ap, nil),
		hold: prometheus.NewDesc("meterproxy_upstream_hold_seconds",
			"How much longer the pool's bulk is held on the upstream's word (remaining below the interactive reserve, or a 429) or by its output budget, as of the store's last answer.",
			ap, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queued, c.inFlight, c.fleet, c.usedRequests, c.usedTokens, c.limitRequests, c.limitTokens, c.limit, c.hold} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	mode := c.a.mode()
	c.a.eachPool(func(id string, l *limiter) {
		pool := poolLabels(id)
		bound := l.InFlightLimit()
		if c.a.backend.LocalFallback() {
			bound = l.limits.Load().local.InFlight // what this replica admits under while Redis is bypassed
		}
		gauge(c.limit, float64(bound), pool.Account, pool.Pool)
		gauge(c.hold, l.UpstreamHold().Seconds(), pool.Account, pool.Pool)
		w := l.Window()
		lim := l.limits.Load().enforced
		rps, tps := lim.PerSecond()
		for _, cl := range classify.Classes {
			class := cl.String()
			gauge(c.queued, float64(l.Queued(cl)), pool.Account, pool.Pool, class, mode)
			gauge(c.inFlight, float64(l.InFlight(cl)), pool.Account, pool.Pool, class, mode)
			gauge(c.fleet, float64(l.FleetInFlight(cl)), pool.Account, pool.Pool, class, mode)
			gauge(c.usedRequests, float64(w.Requests[cl]), pool.Account, pool.Pool, class, mode)
			gauge(c.usedTokens, float64(w.Tokens[cl]), pool.Account, pool.Pool, class, mode)
			gauge(c.limitRequests, rps[cl], pool.Account, pool.Pool, class)
			if lim.AccountTPM > 0 {
				gauge(c.limitTokens, tps[cl], pool.Account, pool.Pool, class)
			}
		}
	})
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
	label, decided := []string{"caller"}, []string{"caller", "mode"}
	return &capCollector{
		a: a,
		queued: prometheus.NewDesc("meterproxy_caller_queue_depth",
			"Requests of a capped caller waiting on this replica, by caller and mode (shadow: shadow mode's simulated decisions).", decided, nil),
		inFlight: prometheus.NewDesc("meterproxy_caller_cap_slots_used",
			"Slots taken under a capped caller's max_in_flight across the fleet, at the store's last answer, by caller. A request holds its slot from passing the cap until it ends, its wait in its pool included, so this can read above the caller's requests upstream (meterproxy_caller_in_flight). By mode, as meterproxy_caller_queue_depth.", decided, nil),
		limit: prometheus.NewDesc("meterproxy_caller_in_flight_limit",
			"A capped caller's callers[].max_in_flight (0: no in-flight cap), by caller.", label, nil),
		rateLimit: prometheus.NewDesc("meterproxy_caller_limit_requests_per_second",
			"A capped caller's callers[].requests_per_minute as requests a second (0: no rate cap), by caller.", label, nil),
	}
}

// Describe implements prometheus.Collector; see capCollector.
func (c *capCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *capCollector) Collect(ch chan<- prometheus.Metric) {
	mode := c.a.mode()
	for name, st := range c.a.caps.States() {
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(st.Queued), name, mode)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.FleetInFlight), name, mode)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.MaxInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.rateLimit, prometheus.GaugeValue, float64(st.RequestsPerMinute)/60, name)
	}
}
