package quota

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meterproxy/meterproxy/quota/adaptive"
)

// adaptiveCollector exports the adaptive in-flight bounds' view at scrape
// time, by account and pool, for the pools with adaptive_in_flight only: the last
// measurement the controller judged and the steps this replica took. The
// bound itself is meterproxy_in_flight_limit (poolCollector), adaptive or
// not.
type adaptiveCollector struct {
	a                        *Admitter
	work, latency, decisions *prometheus.Desc
}

func newAdaptiveCollector(a *Admitter) *adaptiveCollector {
	pool := []string{"account", "pool"}
	return &adaptiveCollector{
		a: a,
		work: prometheus.NewDesc("meterproxy_adaptive_work_per_second",
			"The work a second (output tokens, or completions where responses report none) of the last measurement the pool's adaptive in-flight bound judged, fleet-wide with Redis; only for pools with adaptive_in_flight.",
			pool, nil),
		latency: prometheus.NewDesc("meterproxy_adaptive_latency_seconds_per_work",
			"Latency per unit of work (admission to end, over output tokens or completions) of the last measurement the pool's adaptive in-flight bound judged; only for pools with adaptive_in_flight.",
			pool, nil),
		decisions: prometheus.NewDesc("meterproxy_adaptive_decisions_total",
			"Steps of the pool's adaptive in-flight bound this replica took (the fleet's steps are the sum over replicas), by action: grow, settle, probe_up, probe_down, revert, back_off, latency_rise, hold.",
			[]string{"account", "pool", "action"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *adaptiveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.work
	ch <- c.latency
	ch <- c.decisions
}

// Collect implements prometheus.Collector.
func (c *adaptiveCollector) Collect(ch chan<- prometheus.Metric) {
	c.a.eachPool(func(id string, l *limiter) {
		if l.limits.Load().adaptive == nil {
			return
		}
		view, decisions := l.adapt.view()
		pool := poolLabels(id)
		ch <- prometheus.MustNewConstMetric(c.work, prometheus.GaugeValue, view.Judged.Work, pool.Account, pool.Pool)
		ch <- prometheus.MustNewConstMetric(c.latency, prometheus.GaugeValue, view.Judged.Latency, pool.Account, pool.Pool)
		for _, act := range adaptive.Actions {
			ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(decisions[act]), pool.Account, pool.Pool, string(act))
		}
	})
}
