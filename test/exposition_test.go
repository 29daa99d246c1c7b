package test

import (
	"slices"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestExpositionMatchesTheDashboardsSet: a running meterproxy (Redis store,
// an adaptive in-flight bound, one request through an upstream that sends
// rate-limit headers) exports exactly the meterproxy_* metrics the
// dashboards and alerts are checked against, with those types and label
// names — so the dashboards test's list cannot drift from what the proxy
// exports.
func TestExpositionMatchesTheDashboardsSet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{RPM: 6000}))
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("callers", []map[string]any{ // a capped caller, so the per-caller cap series exist
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk", "max_in_flight": 50, "requests_per_minute": 6000,
			"budget": map[string]any{"usd": 100, "per": "month"}}, // and a budget, so the budget families do
	})
	cfg.set("prices", []map[string]any{{"match": []string{"m"}, "input": 1.0, "output": 2.0}})
	cfg.set("account.tokens_per_minute", 6_000_000) // so the token limits are exported
	cfg.set("account.adaptive_in_flight", true)     // so the adaptive bound's families are exported
	cfg.set("budgets.on_store_error", "local")      // so the local fallback's families are
	p := startProxy(t, cfg, fleetEnv, importKey)
	if status, _, b := post(t, newClient(t, 1), p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`,
		map[string]string{"Authorization": "Bearer " + importKey}); status != 200 {
		t.Fatalf("request: %d %s", status, b)
	}
	// A batch, so its enqueued tokens are exported.
	if status, o := createBatch(t, p.URL, importKey, uploadBatchFile(t, p.URL, importKey, batchFileOf("m", 1, 10)), ""); status != 200 {
		t.Fatalf("batch: %d %+v", status, o)
	}
	waitFor(t, "the batch's tokens enqueued", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_batch_enqueued_tokens", nil) > 0
	})
	mfs := scrape(t, p.AdminURL)
	var exported []string
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "meterproxy_") {
			continue
		}
		exported = append(exported, name)
		spec, known := exportedMetrics[name]
		if !known {
			t.Errorf("%s is exported but not in the dashboards' metric set", name)
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != spec.typ {
			t.Errorf("%s is a %s, the set says %s", name, typ, spec.typ)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if _, ok := spec.labels[l.GetName()]; !ok {
					t.Errorf("%s has label %q the set does not know", name, l.GetName())
				}
			}
		}
	}
	for name := range exportedMetrics {
		if !slices.Contains(exported, name) {
			t.Errorf("%s is in the dashboards' metric set but not exported", name)
		}
	}
}
