package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads one counter series from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return metricValue(t, reg, name, labels)
}

// metricValue reads one counter or gauge series from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := findSeries(t, reg, name, labels)
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// histogramCount reads one histogram series' sample count from reg.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	return findSeries(t, reg, name, labels).GetHistogram().GetSampleCount()
}

// findSeries is the series of name with labels in reg, or nil.
func findSeries(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				return m
			}
		}
	}
	return nil
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

func TestMetricsExposition(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream()})
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", "{}")
	req.Header.Set("X-Meterproxy-Class", "bulk")
	if status, _, _ := do(t, req); status != 200 {
		t.Fatalf("status %d", status)
	}
	want := `
# HELP meterproxy_admissions_total Admission decisions by pool (none for batch and upload), class and outcome (admitted, held, refused, cancelled, batch, upload).
# TYPE meterproxy_admissions_total counter
meterproxy_admissions_total{class="bulk",outcome="admitted",pool="default"} 1
meterproxy_admissions_total{class="bulk",outcome="admitted",pool="none"} 0
meterproxy_admissions_total{class="bulk",outcome="batch",pool="default"} 0
meterproxy_admissions_total{class="bulk",outcome="batch",pool="none"} 0
meterproxy_admissions_total{class="bulk",outcome="cancelled",pool="default"} 0
meterproxy_admissions_total{class="bulk",outcome="cancelled",pool="none"} 0
meterproxy_admissions_total{class="bulk",outcome="held",pool="default"} 0
meterproxy_admissions_total{class="bulk",outcome="held",pool="none"} 0
meterproxy_admissions_total{class="bulk",outcome="refused",pool="default"} 0
meterproxy_admissions_total{class="bulk",outcome="refused",pool="none"} 0
meterproxy_admissions_total{class="bulk",outcome="upload",pool="default"} 0
meterproxy_admissions_total{class="bulk",outcome="upload",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="admitted",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="admitted",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="batch",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="batch",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="cancelled",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="cancelled",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="held",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="held",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="refused",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="refused",pool="none"} 0
meterproxy_admissions_total{class="interactive",outcome="upload",pool="default"} 0
meterproxy_admissions_total{class="interactive",outcome="upload",pool="none"} 0
`
	if err := testutil.GatherAndCompare(p.reg, strings.NewReader(want),
		"meterproxy_admissions_total"); err != nil {
		t.Error(err)
	}
	if got := counterValue(t, p.reg, "meterproxy_requests_total",
		map[string]string{"class": "bulk", "caller": "unknown", "outcome": "forwarded", "code": "200"}); got != 1 {
		t.Errorf("requests_total forwarded 200 = %v, want 1", got)
	}
	if problems, err := testutil.GatherAndLint(p.reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
}
