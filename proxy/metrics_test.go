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

// histogramCount reads the sample count of the histogram series of name
// in reg whose labels include labels, added up.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && matches(m, labels) {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
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
# HELP meterproxy_admissions_total Admission decisions by account and pool (both none for batch and upload), class and outcome (admitted, held, refused, cancelled, batch, upload).
# TYPE meterproxy_admissions_total counter
meterproxy_admissions_total{account="default",class="bulk",outcome="admitted",pool="default"} 1
meterproxy_admissions_total{account="none",class="bulk",outcome="admitted",pool="none"} 0
meterproxy_admissions_total{account="default",class="bulk",outcome="batch",pool="default"} 0
meterproxy_admissions_total{account="none",class="bulk",outcome="batch",pool="none"} 0
meterproxy_admissions_total{account="default",class="bulk",outcome="cancelled",pool="default"} 0
meterproxy_admissions_total{account="none",class="bulk",outcome="cancelled",pool="none"} 0
meterproxy_admissions_total{account="default",class="bulk",outcome="held",pool="default"} 0
meterproxy_admissions_total{account="none",class="bulk",outcome="held",pool="none"} 0
meterproxy_admissions_total{account="default",class="bulk",outcome="refused",pool="default"} 0
meterproxy_admissions_total{account="none",class="bulk",outcome="refused",pool="none"} 0
meterproxy_admissions_total{account="default",class="bulk",outcome="upload",pool="default"} 0
meterproxy_admissions_total{account="none",class="bulk",outcome="upload",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="admitted",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="admitted",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="batch",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="batch",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="cancelled",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="cancelled",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="held",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="held",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="refused",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="refused",pool="none"} 0
meterproxy_admissions_total{account="default",class="interactive",outcome="upload",pool="default"} 0
meterproxy_admissions_total{account="none",class="interactive",outcome="upload",pool="none"} 0
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

// TestMetricsByAccount: with several accounts every series of a pool
// carries its account's configured name and the pool's own name (never a
// joined "ptu/default"); a request that spilled is admitted where it was
// first and counts its tokens at the account that served it; every
// account's series exist before any request.
func TestMetricsByAccount(t *testing.T) {
	ptu, paygo := newAccountServer(t, http.StatusTooManyRequests), newAccountServer(t, http.StatusOK)
	p := spillProxy(t, ptu, paygo)
	for _, account := range []string{"ptu", "paygo"} {
		if findSeries(t, p.reg, "meterproxy_admissions_total", map[string]string{"account": account, "pool": "default", "outcome": "admitted"}) == nil {
			t.Errorf("no pre-initialised admissions series of account %s", account)
		}
	}
	if findSeries(t, p.reg, "meterproxy_refusals_total", map[string]string{"account": "none", "pool": "none"}) == nil {
		t.Error("no pre-initialised refusals series of account and pool none")
	}
	// Issue 37 (item 6): the two histograms a slow request is found by
	// carry its account and pool, every pool's series there from the start.
	for _, account := range []string{"ptu", "paygo"} {
		for _, name := range []string{"meterproxy_queue_wait_seconds", "meterproxy_upstream_duration_seconds"} {
			if findSeries(t, p.reg, name, map[string]string{"account": account, "pool": "default", "class": "bulk"}) == nil {
				t.Errorf("no pre-initialised %s series of account %s", name, account)
			}
		}
	}
	if status, body := postChat(t, p); status != http.StatusOK {
		t.Fatalf("caller got %d %s, want the next account's 200", status, body)
	}
	admitted := map[string]string{"account": "ptu", "pool": "default", "class": "interactive", "outcome": "admitted"}
	if n := counterValue(t, p.reg, "meterproxy_admissions_total", admitted); n != 1 {
		t.Errorf("meterproxy_admissions_total%v = %v, want 1", admitted, n)
	}
	waited := map[string]string{"account": "ptu", "pool": "default", "class": "interactive", "outcome": "admitted"}
	if n := histogramCount(t, p.reg, "meterproxy_queue_wait_seconds", waited); n != 1 {
		t.Errorf("meterproxy_queue_wait_seconds%v counts %d, want the admission's 1", waited, n)
	}
	took := map[string]string{"account": "paygo", "pool": "default", "class": "interactive"}
	waitFor(t, "the upstream duration at the account that served it", func() bool {
		return histogramCount(t, p.reg, "meterproxy_upstream_duration_seconds", took) == 1
	})
	served := map[string]string{"account": "paygo", "pool": "default", "class": "interactive", "caller": "chat", "kind": "output", "estimated": "false"}
	if n := counterValue(t, p.reg, "meterproxy_tokens_total", served); n != 2 {
		t.Errorf("meterproxy_tokens_total%v = %v, want the response's 2", served, n)
	}
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "pool" && strings.Contains(lp.GetValue(), "/") {
					t.Errorf("%s has pool %q: the account is a label of its own", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
}
