package test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"go.yaml.in/yaml/v3"
)

// TestReloadUnderLoad: bulk's share changes from 2 to 5 requests a second
// while a bulk flood runs; after SIGHUP the new partition holds from the
// next second, and no request fails or is lost. A broken file afterwards is
// refused and changes nothing.
func TestReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("8 s load run; skipped with -short")
	}
	fake := fakeprovider.New(fakeprovider.Config{RecordBodies: false})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("account.requests_per_minute", 600) // 10 a second
	cfg.set("classes.interactive.reserve", 0)
	cfg.set("classes.interactive.share", 0.5)
	cfg.set("classes.bulk.share", 0.2) // 2 a second
	cfg.set("classes.bulk.borrow", false)
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.set("callers", []map[string]any{{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"}})
	path := cfg.write(t)
	p := startProxyFile(t, path, fleetEnv, importKey)

	client := newClient(t, 32)
	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	statuses := map[int]int{}
	wait := floodBulk(ctx, client, p.URL, `{"model":"m","messages":[]}`, 12, func(status int) {
		mu.Lock()
		statuses[status]++
		mu.Unlock()
	})
	waitFor(t, "three seconds of the old partition", func() bool { return len(fake.Arrivals()) >= 4 })

	cfg.set("classes.bulk.share", 0.5) // 5 a second
	writeYAML(t, path, cfg)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", map[string]string{"result": "success"}) >= 1
	})
	reloaded := time.Now().Unix()
	waitFor(t, "three seconds of the new partition", func() bool { return fake.Arrivals()[reloaded+4] > 0 })

	if err := os.WriteFile(path, []byte("classes: [this is not: a config"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the broken file to be refused", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", map[string]string{"result": "failure"}) >= 1
	})
	broken := time.Now().Unix()
	waitFor(t, "two seconds after the broken file", func() bool { return fake.Arrivals()[broken+3] > 0 })
	stopped := time.Now().Unix() // this last second is cut short by the test
	stop()
	wait()

	arrivals := fake.Arrivals()
	for s, n := range arrivals {
		switch {
		case s < reloaded && n > 2+1:
			t.Errorf("second %d, before the reload: %d bulk arrivals, want at most 2 (+1 late)", s, n)
		case s > reloaded && s < stopped && (n > 5+1 || n < 4):
			t.Errorf("second %d, after the reload: %d bulk arrivals, want 5 (±1)", s, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for status, n := range statuses {
		if status != http.StatusOK {
			t.Errorf("%d requests ended %d, want every one forwarded", n, status)
		}
	}
	t.Logf("arrivals per second %v; reloaded in second %d; broken file at %d; answers %v", arrivals, reloaded, broken, statuses)
}

func writeYAML(t *testing.T, path string, c config) {
	t.Helper()
	b, err := yaml.Marshal(map[string]any(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadInFlightLimit: meterproxy_in_flight_limit follows a reload of
// account.max_in_flight (it kept the bound it was built with).
func TestReloadInFlightLimit(t *testing.T) {
	cfg := baseConfig(startUpstream(t, fakeprovider.New(fakeprovider.Config{})).URL)
	cfg.set("account.max_in_flight", 200)
	path := cfg.write(t)
	p := startProxyFile(t, path, nil)
	if got := sum(scrape(t, p.AdminURL), "meterproxy_in_flight_limit", nil); got != 200 {
		t.Fatalf("meterproxy_in_flight_limit %v before the reload, want 200", got)
	}
	cfg.set("account.max_in_flight", 50)
	writeYAML(t, path, cfg)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", map[string]string{"result": "success"}) >= 1
	})
	if got := sum(scrape(t, p.AdminURL), "meterproxy_in_flight_limit", nil); got != 50 {
		t.Errorf("meterproxy_in_flight_limit %v after a reload to 50", got)
	}
}

// TestReloadPools: a SIGHUP adds a pool, which admits at once under its own
// label, and a later one removes it, whose series then go; requests for
// its model draw on the account again.
func TestReloadPools(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{})
	cfg := baseConfig(startUpstream(t, fake).URL)
	path := cfg.write(t)
	p := startProxyFile(t, path, nil)
	client := newClient(t, 2)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	reload := func(n float64) {
		t.Helper()
		writeYAML(t, path, cfg)
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reload", func() bool {
			return sum(scrape(t, p.AdminURL), "meterproxy_config_reloads_total", map[string]string{"result": "success"}) >= n
		})
	}
	admitted := func(pool string) float64 {
		return sum(scrape(t, p.AdminURL), "meterproxy_admissions_total", map[string]string{"pool": pool, "outcome": "admitted"})
	}
	cfg.set("account.models", []map[string]any{{"name": "mini", "match": []string{"gpt-4o-mini*"}, "requests_per_minute": 600, "max_in_flight": 7}})
	reload(1)
	if got := sum(scrape(t, p.AdminURL), "meterproxy_in_flight_limit", map[string]string{"pool": "mini"}); got != 7 {
		t.Fatalf("meterproxy_in_flight_limit{pool=mini} %v after the reload that added it, want 7", got)
	}
	if status, _, b := post(t, client, p.URL+"/v1/chat/completions", body, nil); status != 200 {
		t.Fatalf("a request for the new pool's model: %d %s", status, b)
	}
	if got := admitted("mini"); got != 1 {
		t.Fatalf("admitted in pool mini: %v, want 1", got)
	}
	cfg.set("account.models", []map[string]any{})
	reload(2)
	if m := scrape(t, p.AdminURL); m.Sum("meterproxy_in_flight_limit", map[string]string{"pool": "mini"}) != 0 {
		t.Fatal("the removed pool still exports its in-flight bound")
	}
	before := admitted("default")
	if status, _, b := post(t, client, p.URL+"/v1/chat/completions", body, nil); status != 200 {
		t.Fatalf("a request for the removed pool's model: %d %s", status, b)
	}
	if got := admitted("default") - before; got != 1 {
		t.Fatalf("admitted in the account's pool after the removal: %v, want 1", got)
	}
}

// floodBulk runs workers that post body to url's chat completions as the
// bulk caller (importKey), one request after another, each answer's status
// told to count, until ctx ends; it returns the wait for them. A request
// cut by ctx's end is held, not lost: it counts nothing.
func floodBulk(ctx context.Context, client *http.Client, url, body string, workers int, count func(status int)) (wait func()) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+importKey)
				res, err := client.Do(req)
				if err != nil {
					return
				}
				_ = res.Body.Close()
				count(res.StatusCode)
			}
		})
	}
	return wg.Wait
}
