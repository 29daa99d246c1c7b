package test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 37 item 3: budgets on a Redis fleet.

// budgetOn is budgetConfig's fleet on srv, in front of a fake provider of
// its own.
func budgetOn(t *testing.T, srv *redistest.Server) config {
	t.Helper()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{NoLog: true}))
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("store.timeout", "1s")
	budgetConfig(cfg)
	return cfg
}

// TestRedisPersistenceWarning: at start, with budgets configured, a
// replica reads Redis's persistence and warns by name when spend would
// not survive a Redis restart (naming what is lost and appendonly yes);
// appendonly yes is no warning; a Redis that refuses CONFIG GET (managed
// Redis: rename-command) is said to be unknown, and the replica serves.
func TestRedisPersistenceWarning(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		args      []string
		budgets   bool
		want, not []string
	}{
		{"no persistence", []string{"--appendonly", "no", "--save", ""}, true,
			[]string{`"msg":"redis_not_persistent"`, "a Redis restart sets every budget's spend to $0", "appendonly yes"}, []string{"redis_persistence_unknown"}},
		{"no persistence, no budgets", []string{"--appendonly", "no", "--save", ""}, false, nil, []string{"redis_not_persistent", "redis_persistence_unknown"}},
		{"appendonly yes", []string{"--appendonly", "yes"}, true, nil, []string{"redis_not_persistent", "redis_persistence_unknown"}},
		{"CONFIG renamed", []string{"--rename-command", "CONFIG", ""}, true,
			[]string{`"msg":"redis_persistence_unknown"`, "cannot tell whether their spend survives a Redis restart", "appendonly yes"},
			[]string{"redis_not_persistent"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartWith(t, c.args...)
			cfg := budgetOn(t, srv)
			if !c.budgets {
				cfg.withCallers()
			}
			p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
			logs := p.Logs()
			for _, w := range c.want {
				if !strings.Contains(logs, w) {
					t.Errorf("the start's logs do not say %q:\n%s", w, logs)
				}
			}
			for _, n := range c.not {
				if strings.Contains(logs, n) {
					t.Errorf("the start's logs say %q:\n%s", n, logs)
				}
			}
		})
	}
}

// TestSpendFileBesideRedisURL: store.spend_file beside store.redis_url
// refuses the start, naming both keys and what to do, instead of
// ignoring the file (and the spend it holds) without a word.
func TestSpendFileBesideRedisURL(t *testing.T) {
	t.Parallel()
	cfg := budgetOn(t, redistest.Start(t))
	cfg.set("store.spend_file", t.TempDir()+"/spend.json")
	_, err := startProxyErr(t, cfg, fleetEnv)
	if err == nil || !strings.Contains(err.Error(), "store.spend_file: is set beside store.redis_url") ||
		!strings.Contains(err.Error(), "remove store.spend_file") {
		t.Fatalf("start: %v, want store.spend_file refused beside store.redis_url", err)
	}
}

// TestBudgetSpendSurvivesRedisRestart: the fleet example of docs/fleet.md
// as a newcomer runs it — redis-server --appendonly yes --dir <dir> —
// keeps the day's spend across a Redis restart (a kill -9 and a start on
// the same port and directory): the replica reports the spend still
// there, adds to it, and refuses once the budget is spent.
func TestBudgetSpendSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPersistent(t)
	p := startProxy(t, budgetOn(t, srv), fleetEnv, chatKey, importKey)
	if strings.Contains(p.Logs(), "redis_not_persistent") {
		t.Errorf("a persistent Redis was warned of:\n%s", p.Logs())
	}
	client := newClient(t, 1)
	send := func(n int) (int, string) {
		status, _, body := post(t, client, p.URL+"/v1/chat/completions", fmt.Sprintf(budgetShapes[0].body, budgetMaxTokens, n),
			map[string]string{"Authorization": "Bearer " + importKey})
		return status, string(body)
	}
	budget := map[string]string{"budget": "caller:nightly-import"}
	settled := func(above float64) (spent float64) {
		waitFor(t, "the spend settled", func() bool {
			m := scrape(t, p.AdminURL)
			spent = sum(m, "meterproxy_budget_spent_usd", budget)
			return spent > above && sum(m, "meterproxy_budget_reserved_usd", budget) == 0
		})
		return spent
	}
	for n := range 20 {
		if status, body := send(n); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", n, status, body)
		}
	}
	before := settled(0)

	srv.Restart(t)
	unavailable := 0
	waitFor(t, "a budgeted request served after the restart", func() bool {
		status, body := send(100)
		if status == http.StatusServiceUnavailable && strings.Contains(body, "store_unavailable") {
			unavailable++
			return false
		}
		if status != http.StatusOK {
			t.Fatalf("after the restart: %d %s", status, body)
		}
		return true
	})
	after := settled(before)
	served := 21
	for n := 200; ; n++ {
		status, body := send(n)
		if status == http.StatusTooManyRequests && strings.Contains(body, "budget_exceeded") {
			break
		}
		if status != http.StatusOK || n > 400 {
			t.Fatalf("spending the rest: %d %s", status, body)
		}
		served++
	}
	final := settled(after)
	t.Logf("spent $%.4f of $%.2f before the Redis restart; after it the replica read $%.4f (one more request, %d refused store_unavailable while it reconnected); "+
		"refused budget_exceeded at $%.4f after %d requests served", before, budgetUSD, after, unavailable, final, served)
	if final > budgetUSD {
		t.Errorf("spent $%.4f of a $%.2f budget", final, budgetUSD)
	}
	showState(t, p)
}

// showState logs /admin/state's budgets.
func showState(t *testing.T, p *procs.Proxy) {
	t.Helper()
	resp, err := http.Get(p.AdminURL + "/admin/state") //nolint:noctx // a test's one look
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if i := strings.Index(string(body), `"budgets"`); i >= 0 {
		t.Logf("/admin/state: %.300s", body[i:])
	}
}

// TestBudgetsLocalDuringOutage: budgets.on_store_error: local on two
// replicas (expected_replicas 2) whose Redis is killed mid-day: each
// replica goes on serving the budgeted caller within its share of what
// was left — (limit − spent) ÷ 2 — and refuses budget_exceeded beyond it;
// once Redis is back (appendonly: the spend before the outage is still
// there) what each spent locally is added to Redis's spend, once: the
// budget's spend is what was spent before plus both replicas' local
// spend, within the budget.
func TestBudgetsLocalDuringOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPersistent(t)
	cfg := budgetOn(t, srv)
	cfg.set("account.expected_replicas", 2)
	cfg.set("budgets.on_store_error", "local")
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	client := newClient(t, 1)
	send := func(p *procs.Proxy, n int) (int, string) {
		status, _, body := post(t, client, p.URL+"/v1/chat/completions", fmt.Sprintf(budgetShapes[0].body, budgetMaxTokens, n),
			map[string]string{"Authorization": "Bearer " + importKey})
		return status, string(body)
	}
	budget := map[string]string{"budget": "caller:nightly-import"}
	for n := range 20 {
		if status, body := send(replicas[n%2], n); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", n, status, body)
		}
	}
	var before float64
	for _, p := range replicas { // both have read the spend: their shares are known
		waitFor(t, "the spend settled and read", func() bool {
			m := scrape(t, p.AdminURL)
			before = sum(m, "meterproxy_budget_spent_usd", budget)
			return before > 0.1 && sum(m, "meterproxy_budget_reserved_usd", budget) == 0
		})
	}

	srv.Kill(t)
	var local [2]float64
	served := [2]int{}
	for i, p := range replicas {
		for n := 1000 * (i + 1); ; n++ {
			status, body := send(p, n)
			if status == http.StatusTooManyRequests && strings.Contains(body, "budget_exceeded") {
				break
			}
			if status != http.StatusOK || served[i] > 200 {
				t.Fatalf("replica %d during the outage: %d %s", i, status, body)
			}
			served[i]++
		}
		waitFor(t, "the local spend counted", func() bool {
			m := scrape(t, p.AdminURL)
			local[i] = sum(m, "meterproxy_budget_local_spent_usd_total", budget)
			return local[i] > 0 && sum(m, "meterproxy_budget_local", nil) == 1
		})
		if share := (budgetUSD - before) / 2; local[i] > share+1e-9 {
			t.Errorf("replica %d spent $%.4f on its own, past its share $%.4f", i, local[i], share)
		}
	}

	srv.Restart(t)
	var after float64
	for _, p := range replicas {
		waitFor(t, "the local spend reconciled", func() bool {
			m := scrape(t, p.AdminURL)
			after = sum(m, "meterproxy_budget_spent_usd", budget)
			return sum(m, "meterproxy_budget_local_reconciled_usd_total", budget) == sum(m, "meterproxy_budget_local_spent_usd_total", budget) &&
				sum(m, "meterproxy_budget_local", nil) == 0
		})
	}
	want := before + local[0] + local[1]
	waitFor(t, "Redis's spend to hold both replicas' local spend", func() bool {
		after = sum(scrape(t, replicas[0].AdminURL), "meterproxy_budget_spent_usd", budget)
		return after >= want-1e-6
	})
	t.Logf("$%.4f spent of $%.2f before the outage; during it replica 0 served %d ($%.4f), replica 1 %d ($%.4f), each then refused budget_exceeded "+
		"(share $%.4f); after it Redis holds $%.4f", before, budgetUSD, served[0], local[0], served[1], local[1], (budgetUSD-before)/2, after)
	if after > want+1e-6 || after > budgetUSD {
		t.Errorf("Redis's spend $%.4f after the reconciliation, want $%.4f (counted once), within $%.2f", after, want, budgetUSD)
	}
	for n := 5000; ; n++ { // what the shares left unspent, from Redis, then refused
		status, body := send(replicas[n%2], n)
		if status == http.StatusTooManyRequests && strings.Contains(body, "budget_exceeded") {
			break
		}
		if status != http.StatusOK || n > 5100 {
			t.Fatalf("after the outage: %d %s", status, body)
		}
	}
}
