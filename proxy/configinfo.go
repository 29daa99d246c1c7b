package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The modes as /admin/state and meterproxy_config_info name them.
const (
	modeEnforce = "enforce"
	modeShadow  = "shadow"
)

// modeOf is the mode l runs in: shadow or enforce.
func modeOf(l *Live) string {
	if l.Shadow {
		return modeShadow
	}
	return modeEnforce
}

// configInfoDesc is meterproxy_config_info: one series, 1, labelled with
// the configuration in force's fleet hash (Live.ConfigHash) and mode.
var configInfoDesc = prometheus.NewDesc("meterproxy_config_info", configInfoHelp, []string{"hash", "mode"}, nil)

// configInfoHelp is meterproxy_config_info's help.
const configInfoHelp = "The configuration this replica runs: 1, labelled with the hash of what the fleet must agree on (limits, classes, callers, prices; not listen addresses, secrets or logging) and the mode (shadow, enforce); a reload replaces it. count(count by (hash, mode) (meterproxy_config_info)) == 1: every replica runs one configuration."

// configInfo collects meterproxy_config_info from the live configuration
// at each scrape, so a reload replaces its one series at once. Safe for
// concurrent use.
type configInfo struct{ live *atomic.Pointer[Live] }

// Describe implements prometheus.Collector.
func (c configInfo) Describe(ch chan<- *prometheus.Desc) { ch <- configInfoDesc }

// Collect implements prometheus.Collector.
func (c configInfo) Collect(ch chan<- prometheus.Metric) {
	l := c.live.Load()
	ch <- prometheus.MustNewConstMetric(configInfoDesc, prometheus.GaugeValue, 1, l.ConfigHash, modeOf(l))
}
