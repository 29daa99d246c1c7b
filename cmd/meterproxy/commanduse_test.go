package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// providerKeyEnv is the environment the README advises for serve: the
// provider key exported, which beside classify.unknown_callers: forward
// serve refuses as an open relay.
var providerKeyEnv = []string{"METERPROXY_UPSTREAM_API_KEY=sk-provider-0123456789"}

// TestPlanValidatesWhatItUses: plan sends nothing and admits no caller, so
// neither the exported provider key nor a caller's unset key_env stops it.
func TestPlanValidatesWhatItUses(t *testing.T) {
	path := writeConfig(t, "account: {requests_per_minute: 20000, max_in_flight: 1000}\n"+
		"callers:\n  - {name: app, key_env: APP_KEY_UNSET, class: interactive}\n")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"plan", "--config", path, "--latency", "800ms"}, providerKeyEnv, &out, &errOut); err != nil {
		t.Fatalf("plan: %v", err)
	}
	if !strings.Contains(out.String(), "fleet in flight") {
		t.Errorf("no plan:\n%s", out.String())
	}
	// serve still refuses it: the check is serve's, not gone.
	if _, err := loadConfig(path, providerKeyEnv, lookupIn(providerKeyEnv)); err == nil {
		t.Error("serve's config accepts the open relay and the unset key_env")
	}
}

// TestSweepValidatesWhatItUses: sweep --url with the provider key exported
// runs.
func TestSweepValidatesWhatItUses(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond, NoLog: true})
	srv := httptest.NewServer(p)
	defer srv.Close()
	var out, errOut bytes.Buffer
	args := []string{"sweep", "--url", srv.URL, "--model", "fake-model", "--start", "1", "--max", "1", "--duration", "100ms"}
	if err := run(t.Context(), args, providerKeyEnv, &out, &errOut); err != nil {
		t.Fatalf("sweep: %v\n%s", err, errOut.String())
	}
	if got := tableRows(out.String()); len(got) != 1 {
		t.Errorf("table rows %v, want one:\n%s", got, out.String())
	}
}

// TestPlanFromZeroBoundPool: a pool whose bound works out to 0 at the
// measured service time is named, and the account and the other pools are
// printed.
func TestPlanFromZeroBoundPool(t *testing.T) {
	path := writeConfig(t, "account:\n  requests_per_minute: 20000\n  max_in_flight: 1000\n  models:\n"+
		"    - {name: tiny, match: [tiny-*], requests_per_minute: 30, max_in_flight: 10}\n"+
		"    - {name: mini, match: [gpt-4o-mini*], requests_per_minute: 6000, max_in_flight: 1000}\n")
	url := serveMetrics(t, metricsText)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"plan", "--config", path, "--from", url, "--replicas", "10"}, nil, &out, &errOut); err != nil {
		t.Fatalf("plan: %v", err)
	}
	for _, want := range []string{"fleet in flight        266", "pool tiny (account.models[].name): not planned: plan: the fleet in-flight bound is 0",
		"pool mini", "fleet in flight        80"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
