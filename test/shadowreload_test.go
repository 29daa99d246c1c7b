package test

import (
	"context"
	"math"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestShadowToEnforce (issue 37 item 1): an importer's flood in mode
// shadow, then the reload to enforce, through the binary. In shadow mode
// every request is forwarded, the bulk budget's spend is what the fake's
// usage priced (meterproxy_spend_usd_total) and nothing is reserved
// while simulated waits queue (max_wait a minute, as bulk's default);
// the gauges say mode="shadow". The reload to enforce drops the
// simulated waits at once, and real bulk then runs at its share, 5 a
// second, from the first whole second — before, the simulated waiters
// went on taking the grants for up to their max_wait and real bulk
// starved behind them.
func TestShadowToEnforce(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s load run; skipped with -short")
	}
	fake := fakeprovider.New(fakeprovider.Config{})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("mode", "shadow")
	cfg.set("account.requests_per_minute", 600) // 10 a second
	cfg.set("classes.interactive.reserve", 0)
	cfg.set("classes.interactive.share", 0.5)
	cfg.set("classes.bulk.share", 0.5) // 5 a second
	cfg.set("classes.bulk.borrow", false)
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.set("classes.bulk.budget", map[string]any{"usd": 100, "per": "day"})
	cfg.set("prices", []map[string]any{{"match": []string{"m"}, "input": 100.0, "output": 1000.0}})
	cfg.set("callers", []map[string]any{{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"}})
	path := cfg.write(t)
	p := startProxyFile(t, path, fleetEnv, importKey)

	client := newClient(t, 16)
	var mu sync.Mutex
	statuses := map[int]int{}
	body := `{"model":"m","max_tokens":50,"messages":[]}`
	count := func(status int) {
		mu.Lock()
		statuses[status]++
		mu.Unlock()
	}

	ctx, stop := context.WithCancel(t.Context())
	wait := floodBulk(ctx, client, p.URL, body, 8, count)
	waitFor(t, "a flood of shadow decisions queued", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_queue_depth", map[string]string{"class": "bulk", "mode": "shadow"}) >= 50
	})
	stop()
	wait()
	m := scrape(t, p.AdminURL)
	if r := sum(m, "meterproxy_budget_reserved_usd", nil); r != 0 {
		t.Errorf("meterproxy_budget_reserved_usd = %v in mode shadow with %v simulated waits queued; want nothing reserved", r, sum(m, "meterproxy_queue_depth", nil))
	}
	spend := sum(m, "meterproxy_spend_usd_total", nil)
	waitFor(t, "the budget charged what the forwarded requests spent", func() bool {
		return math.Abs(sum(scrape(t, p.AdminURL), "meterproxy_budget_spent_usd", nil)-spend) < 1e-6
	})
	served := fake.Stats().Served
	t.Logf("shadow: %d forwarded, $%.4f spent, %v simulated waits queued", served, spend, sum(m, "meterproxy_queue_depth", nil))

	cfg.set("mode", "enforce")
	writeYAML(t, path, cfg)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", map[string]string{"result": "success"}) >= 1
	})
	waitFor(t, "the simulated waits dropped", func() bool {
		m := scrape(t, p.AdminURL)
		return sum(m, "meterproxy_queue_depth", nil) == 0 && sum(m, "meterproxy_in_flight", nil) == 0
	})
	reloaded := time.Now().Unix()
	ctx, stop = context.WithCancel(t.Context())
	wait = floodBulk(ctx, client, p.URL, body, 8, count)
	waitFor(t, "three whole seconds of enforcement", func() bool { return fake.Arrivals()[reloaded+4] > 0 })
	stopped := time.Now().Unix() // this last second is cut short by the test
	stop()
	wait()

	for s, n := range fake.Arrivals() {
		if s > reloaded && s < stopped && (n > 5+1 || n < 4) {
			t.Errorf("second %d, enforcing: %d bulk arrivals, want 5 (±1)", s, n)
		}
	}
	if u := sum(scrape(t, p.AdminURL), "meterproxy_shadow_decisions_total", map[string]string{"outcome": "unfinished"}); u < 50 {
		t.Errorf("%v shadow decisions recorded unfinished, want the 50 or more the reload dropped", u)
	}
	mu.Lock()
	defer mu.Unlock()
	for status, n := range statuses {
		if status != http.StatusOK {
			t.Errorf("%d requests ended %d, want every one forwarded", n, status)
		}
	}
	t.Logf("arrivals per second %v; reloaded in second %d; answers %v", fake.Arrivals(), reloaded, statuses)
}
