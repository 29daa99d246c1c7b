package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 25: spend budgets hold under concurrency, on one replica and on a
// fleet. The prices are high on purpose, so that a $1 budget is a few
// dozen requests: gpt-4o at $100 input and $1000 output per million
// tokens, claude-sonnet-4 at $100 / $1000 with cache writes at $125 and
// reads at $10.
const (
	budgetPriceIn, budgetPriceOut = 100.0, 1000.0 // USD per million tokens
	budgetMaxTokens               = 60            // each request's output cap: its worst case is ~$0.065
	budgetUSD                     = 1.0
	budgetCallers                 = 25
)

// budgetConfig is a proxy with prices and a $1 daily budget on
// nightly-import (bulk); chat-frontend (interactive) has none.
func budgetConfig(cfg config) {
	cfg.set("prices", []map[string]any{
		{"match": []string{"gpt-4o*"}, "input": budgetPriceIn, "output": budgetPriceOut},
		{"match": []string{"claude-sonnet-4*"}, "input": budgetPriceIn, "cache_write": 125.0, "cache_read": 10.0, "output": budgetPriceOut},
	})
	cfg.set("callers", []map[string]any{
		{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"},
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk", "budget": map[string]any{"usd": budgetUSD, "per": "day"}},
	})
	cfg.set("classes.bulk.max_wait", "30s")
	cfg.set("account.requests_per_minute", 600_000)
	cfg.set("upstream.api_key", "sk-provider-budget-test")
	cfg.set("classify.unknown_callers", "reject")
}

// budgetShape is a request a budgeted caller sends: its path, its body
// (a format of its output cap and its number) and the API that reads its
// answer's usage.
type budgetShape struct {
	path, body string
	api        usage.API
}

// budgetShapes are the requests the budgeted callers send in turn: a plain
// chat completion, an OpenAI stream with usage, an Anthropic stream.
var budgetShapes = []budgetShape{
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":%d,"messages":[{"role":"user","content":"count the sheep, request %d"}]}`, usage.ChatCompletions},
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"stream the sheep, request %d"}]}`, usage.ChatCompletions},
	{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"the sheep again, request %d"}]}`, usage.Messages},
}

// budgetRun is what a budget load saw: the cost of every answer the
// upstream served the budgeted caller, priced here by hand from the usage
// each answer reported; the refusals by code; interactive's answers.
type budgetRun struct {
	// shapes are what is sent in turn; nil is budgetShapes.
	shapes             []budgetShape
	mu                 sync.Mutex
	spent              float64 // dollars
	served             int
	refusals           map[string]int
	interactive        map[int]int
	interactiveSlowest time.Duration
	unexpected         []string
}

// priced is what one answer's usage costs at the test's prices.
func priced(u usage.Usage) float64 {
	uncached := u.Input - u.CacheRead - u.CacheWrite
	return (float64(uncached)*budgetPriceIn + float64(u.CacheRead)*10 + float64(u.CacheWrite)*125 + float64(u.Output)*budgetPriceOut) / 1e6
}

// budgetReplica is the config of one replica with budgetConfig in front
// of a fake provider of its own.
func budgetReplica(t *testing.T) config {
	t.Helper()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: 50 * time.Millisecond, NoLog: true}))
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	budgetConfig(cfg)
	return cfg
}

// budgetFleet is the config of a fleet's replicas with budgetConfig on a
// Redis of their own, in front of one fake provider.
func budgetFleet(t *testing.T) config {
	t.Helper()
	srv := redistest.Start(t)
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: 50 * time.Millisecond, NoLog: true}))
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("store.timeout", "1s")
	budgetConfig(cfg)
	return cfg
}

// sendBudgeted sends one request of shape n and records its answer; it
// reports whether the caller may go on (not refused as budget_exceeded).
func (r *budgetRun) sendBudgeted(ctx context.Context, client *http.Client, base string, n int) bool {
	shapes := r.shapes
	if shapes == nil {
		shapes = budgetShapes
	}
	shape := shapes[n%len(shapes)]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+shape.path, strings.NewReader(fmt.Sprintf(shape.body, budgetMaxTokens, n)))
	if err != nil {
		r.note("%v", err)
		return false
	}
	req.Header.Set("Authorization", "Bearer "+importKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		r.note("request %d: %v", n, err)
		return false
	}
	defer func() { _ = res.Body.Close() }()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusOK {
		m := usage.NewMeter(shape.api, res.Header.Get("Content-Type"), 0)
		_, _ = m.Write(body)
		u := m.Finish(true)
		r.mu.Lock()
		defer r.mu.Unlock()
		if u.Estimated {
			r.unexpected = append(r.unexpected, fmt.Sprintf("request %d: an answer without usage", n))
		}
		r.spent += priced(u)
		r.served++
		return true
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	code := e.Error.Code
	if shape.api == usage.Messages {
		code = e.Error.Type // Anthropic's shape has no code
	}
	r.mu.Lock()
	r.refusals[fmt.Sprintf("%d %s should-retry=%s", res.StatusCode, code, res.Header.Get("X-Should-Retry"))]++
	r.mu.Unlock()
	return res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "is spent")
}

func (r *budgetRun) note(format string, args ...any) {
	r.mu.Lock()
	r.unexpected = append(r.unexpected, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// runBudgetLoad sends, through the replicas in turn, budgetCallers
// budgeted callers at once until each is refused as over its budget,
// beside an interactive caller without a budget.
func runBudgetLoad(t *testing.T, replicas []*procs.Proxy) *budgetRun {
	t.Helper()
	r := &budgetRun{refusals: map[string]int{}, interactive: map[int]int{}}
	client := newClient(t, budgetCallers+8)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range budgetCallers {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n += budgetCallers {
				if !r.sendBudgeted(ctx, client, replicas[n%len(replicas)].URL, n) {
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var chat sync.WaitGroup
	chat.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond): // the interactive caller's pace, not a synchronisation
			}
			start := time.Now()
			status, _, _ := post(t, client, replicas[n%len(replicas)].URL+"/v1/chat/completions",
				`{"model":"gpt-4o","max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, map[string]string{"Authorization": "Bearer " + chatKey})
			took := time.Since(start)
			r.mu.Lock()
			r.interactive[status]++
			r.interactiveSlowest = max(r.interactiveSlowest, took)
			r.mu.Unlock()
		}
	})
	wg.Wait()
	close(done)
	chat.Wait()
	return r
}

// checkBudgetRun: the priced usage the upstream served the budgeted
// caller never passed its budget and reached 80% of it; it was refused as
// budget_exceeded, not retried; the caller without a budget was served.
func checkBudgetRun(t *testing.T, r *budgetRun, replicas []*procs.Proxy) {
	t.Helper()
	t.Logf("%d budgeted answers served, priced at $%.4f of the $%.2f budget (%.1f%%); refusals %v; interactive %v, slowest %v",
		r.served, r.spent, budgetUSD, 100*r.spent/budgetUSD, r.refusals, r.interactive, r.interactiveSlowest)
	if r.spent > budgetUSD+1e-9 {
		t.Errorf("the upstream served $%.4f to a caller with a $%.2f budget", r.spent, budgetUSD)
	}
	if r.spent < 0.8*budgetUSD {
		t.Errorf("only $%.4f of $%.2f spent before the refusals: refused early", r.spent, budgetUSD)
	}
	exceeded := r.refusals["429 budget_exceeded should-retry=false"] + r.refusals["429 insufficient_quota should-retry=false"]
	if exceeded < budgetCallers || exceeded != sumValues(r.refusals) {
		t.Errorf("refusals %v, want every caller's last answer a 429 budget_exceeded with x-should-retry false", r.refusals)
	}
	if r.interactive[http.StatusOK] == 0 || len(r.interactive) != 1 {
		t.Errorf("the caller without a budget got %v, want only 200s", r.interactive)
	}
	for _, u := range r.unexpected {
		t.Error(u)
	}
	// The spend metric is the priced usage, ± 1%, summed over replicas.
	var metric float64
	for _, p := range replicas {
		metric += sum(scrape(t, p.AdminURL), "meterproxy_spend_usd_total", map[string]string{"caller": "nightly-import"})
	}
	if metric < 0.99*r.spent || metric > 1.01*r.spent {
		t.Errorf("meterproxy_spend_usd_total{caller=nightly-import} = $%.4f, want the $%.4f the answers' usage costs, ± 1%%", metric, r.spent)
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestBudgetHoldsUnderConcurrency: 25 requests at once of a caller with a
// $1 daily budget — plain chat completions, OpenAI streams with usage and
// Anthropic streams, each of worst case ~$0.065 — until each is refused:
// on one replica and on a fleet of three sharing Redis.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("budget load runs; skipped with -short")
	}
	t.Parallel()
	t.Run("one replica", func(t *testing.T) {
		p := startProxy(t, budgetReplica(t), fleetEnv, chatKey, importKey)
		checkBudgetRun(t, runBudgetLoad(t, []*procs.Proxy{p}), []*procs.Proxy{p})
	})
	t.Run("3 replicas", func(t *testing.T) {
		cfg := budgetFleet(t)
		replicas := make([]*procs.Proxy, 3)
		for i := range replicas {
			replicas[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey)
		}
		checkBudgetRun(t, runBudgetLoad(t, replicas), replicas)
	})
}

// kill ends p with SIGKILL and waits for it to exit.
func kill(t *testing.T, p *procs.Proxy) {
	t.Helper()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
}

// refusedAsSpent sends the budgeted caller's request to p and reports
// whether it was refused as over its budget.
func refusedAsSpent(t *testing.T, p *procs.Proxy) bool {
	t.Helper()
	status, hdr, body := post(t, newClient(t, 1), p.URL+"/v1/chat/completions",
		fmt.Sprintf(budgetShapes[0].body, budgetMaxTokens, 0), map[string]string{"Authorization": "Bearer " + importKey})
	t.Logf("after the restart: %d %s (x-should-retry %s)", status, strings.TrimSpace(string(body)), hdr.Get("X-Should-Retry"))
	return status == http.StatusTooManyRequests && strings.Contains(string(body), "budget_exceeded")
}

// TestBudgetSurvivesRestart: spend outlives the process. A single replica
// keeps it in store.spend_file (written every second), a fleet in Redis:
// spent, killed with SIGKILL and started again, the budgeted caller is
// still refused.
func TestBudgetSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("budget load runs; skipped with -short")
	}
	t.Parallel()
	t.Run("one replica, spend file", func(t *testing.T) {
		cfg := budgetReplica(t)
		file := filepath.Join(t.TempDir(), "spend.json")
		cfg.set("store.spend_file", file)
		p := startKillable(t, cfg)
		r := runBudgetLoad(t, []*procs.Proxy{p})
		t.Logf("spent $%.4f of $%.2f before the kill", r.spent, budgetUSD)
		// The file is written every second: wait for the spend to be in it
		// — a kill -9 loses what the last second settled, no more.
		waitFor(t, "the spend in the spend file", func() bool {
			b, err := os.ReadFile(file)
			var f struct {
				Budgets []struct {
					Spent int64 `json:"spent_nanodollars"`
				} `json:"budgets"`
			}
			return err == nil && json.Unmarshal(b, &f) == nil && len(f.Budgets) > 0 && float64(f.Budgets[0].Spent)/1e9 >= r.spent-1e-9
		})
		kill(t, p)
		if !refusedAsSpent(t, startKillable(t, cfg)) {
			t.Error("after a kill -9 and a restart on the same spend file, the spent caller was not refused")
		}
	})
	t.Run("3 replicas, Redis", func(t *testing.T) {
		cfg := budgetFleet(t)
		replicas := make([]*procs.Proxy, 3)
		for i := range replicas {
			replicas[i] = startKillable(t, cfg)
		}
		r := runBudgetLoad(t, replicas)
		t.Logf("spent $%.4f of $%.2f before the kill", r.spent, budgetUSD)
		for _, p := range replicas {
			kill(t, p)
		}
		for range replicas {
			if !refusedAsSpent(t, startKillable(t, cfg)) {
				t.Error("after the fleet's kill -9 and a restart on the same Redis, the spent caller was not refused")
			}
		}
	})
}

// TestBudgetInShadowMode: in mode shadow every request is forwarded, and
// the budget fills with what the answers cost, so the shadow decisions
// say when enforcement would have refused as budget_exceeded.
func TestBudgetInShadowMode(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{NoLog: true}))
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("mode", "shadow")
	budgetConfig(cfg)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 1)
	for n := range 100 { // each costs about $0.012: the $1 budget is spent after about 80
		status, _, body := post(t, client, p.URL+"/v1/chat/completions", fmt.Sprintf(budgetShapes[0].body, budgetMaxTokens, n),
			map[string]string{"Authorization": "Bearer " + importKey})
		if status != http.StatusOK {
			t.Fatalf("request %d in shadow mode: %d %s, want every request forwarded", n, status, body)
		}
	}
	waitFor(t, "a shadow decision budget_exceeded", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_shadow_decisions_total", map[string]string{"outcome": "budget_exceeded"}) > 0
	})
	t.Logf("100 requests forwarded; shadow decisions budget_exceeded: %v",
		sum(scrape(t, p.AdminURL), "meterproxy_shadow_decisions_total", map[string]string{"outcome": "budget_exceeded"}))
}
