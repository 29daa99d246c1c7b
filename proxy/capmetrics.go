package proxy

import (
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// capCollector exports the capped callers' numbers at scrape time. The set
// of capped callers changes with reloads, so it is an unchecked collector:
// Describe sends nothing.
type capCollector struct {
	caps             *quota.Admitter
	queued, inFlight *prometheus.Desc
	limit, rateLimit *prometheus.Desc
}

func newCapCollector(caps *quota.Admitter) *capCollector {
	label := []string{"caller"}
	return &capCollector{
		caps: caps,
		queued: prometheus.NewDesc("meterproxy_caller_queue_depth",
			"Requests of a capped caller waiting on this replica for the caller's own cap, by caller.", label, nil),
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
	for name, st := range c.caps.Caps() {
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(st.Queued), name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.FleetInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.MaxInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.rateLimit, prometheus.GaugeValue, float64(st.RequestsPerMinute), name)
	}
}
