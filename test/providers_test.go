package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 36: one deployment in front of an OpenAI project, an Azure OpenAI
// resource and an Anthropic workspace — each a fake provider of its own —
// with one caller's budget and another's cap across all three.
const (
	openAIAccountKey    = "sk-account-openai-gggggggggggggggggg"
	azureAccountKey     = "azure-account-key-hhhhhhhhhhhhhhhhhh"
	anthropicAccountKey = "sk-ant-account-iiiiiiiiiiiiiiiiiiiii"
	providersCapped     = 2 // chat-frontend's max_in_flight, across the three
)

var providersEnv = append([]string{"OPENAI_ACCOUNT_KEY=" + openAIAccountKey, "AZURE_ACCOUNT_KEY=" + azureAccountKey,
	"ANTHROPIC_ACCOUNT_KEY=" + anthropicAccountKey}, fleetEnv...)

// providerShapes are the budgeted caller's requests in turn, one per
// provider's SDK family: OpenAI's chat completions, Azure's deployment
// path (the deployment gpt-4o, priced as the model), Anthropic's
// messages streamed.
var providerShapes = []budgetShape{
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":%d,"messages":[{"role":"user","content":"count the sheep, request %d"}]}`, usage.ChatCompletions},
	{"/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", `{"max_tokens":%d,"messages":[{"role":"user","content":"count the goats, request %d"}]}`, usage.ChatCompletions},
	{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"the sheep again, request %d"}]}`, usage.Messages},
}

// peakCounter counts the requests the handlers it wraps serve at once,
// together, and the most they served at once since peak was reset.
type peakCounter struct {
	now, peak atomic.Int64
}

// wrap is next, counted.
func (c *peakCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for p := c.peak.Load(); n > p; p = c.peak.Load() {
			if c.peak.CompareAndSwap(p, n) {
				break
			}
		}
		next.ServeHTTP(w, r)
	})
}

// providerFake is one provider's fake account.
type providerFake struct {
	name, key, header string
	fake              *fakeprovider.Provider
	url               string
}

// TestSeveralProvidersBehindOneDeployment runs the three accounts behind
// one replica, then behind a fleet of two on one Redis:
//
//   - each family's requests reach only its provider's account, with only
//     that account's key, in the header that provider reads; no caller's
//     key reaches any;
//   - nightly-import's $1 budget holds across the three: the usage the
//     fakes answered it, priced, never passes the budget, and every
//     provider had part of it;
//   - chat-frontend's cap of 2 in flight holds across the three;
//   - a path of an API no account serves is refused 404 no_account,
//     counted, and reaches no account.
func TestSeveralProvidersBehindOneDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("budget runs through real processes; skipped with -short")
	}
	srv := redistest.Start(t)
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			runSeveralProviders(t, srv, replicas)
		})
	}
}

func runSeveralProviders(t *testing.T, srv *redistest.Server, replicas int) {
	fakes := []*providerFake{
		{name: "openai", key: "Bearer " + openAIAccountKey, header: "Authorization"},
		{name: "azure", key: azureAccountKey, header: "Api-Key"},
		{name: "anthropic", key: anthropicAccountKey, header: "X-Api-Key"},
	}
	var accounts []map[string]any
	var seen peakCounter // across the three accounts
	for _, f := range fakes {
		f.fake = fakeprovider.New(fakeprovider.Config{Latency: 100 * time.Millisecond, RecordBodies: true})
		f.url = startUpstream(t, seen.wrap(f.fake)).URL
		accounts = append(accounts, map[string]any{"name": f.name + "-account", "url": f.url, "provider": f.name,
			"api_key_env": strings.ToUpper(f.name) + "_ACCOUNT_KEY", "serves": []string{"interactive", "bulk"},
			"account": map[string]any{"requests_per_minute": 600_000, "max_in_flight": 100}})
	}
	cfg := baseConfig(fakes[0].url)
	if replicas > 1 {
		cfg = fleetConfig(fakes[0].url, srv, redistest.Prefix(t))
		cfg.set("account.expected_replicas", replicas)
		cfg.set("store.timeout", "1s")
	}
	budgetConfig(cfg)
	delete(cfg["upstream"].(map[string]any), "url")
	delete(cfg["upstream"].(map[string]any), "api_key")
	delete(cfg, "account")
	if replicas > 1 {
		cfg.set("account.expected_replicas", replicas)
	}
	cfg.set("upstream.accounts", accounts)
	cfg.set("classes.interactive.max_wait", "30s")
	cfg.set("callers", []map[string]any{
		{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive", "max_in_flight": providersCapped},
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk", "budget": map[string]any{"usd": budgetUSD, "per": "day"}},
	})
	var procsUp []*procs.Proxy
	secrets := []string{chatKey, importKey, openAIAccountKey, azureAccountKey, anthropicAccountKey}
	for range replicas {
		procsUp = append(procsUp, startProxy(t, cfg, providersEnv, secrets...))
	}

	// The budget, across the three providers.
	run := &budgetRun{shapes: providerShapes, refusals: map[string]int{}, interactive: map[int]int{}}
	client := newClient(t, 32)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	const workers = 6
	for i := range workers {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n += workers {
				if !run.sendBudgeted(ctx, client, procsUp[n%len(procsUp)].URL, n) {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d budgeted answers served across three providers, priced at $%.4f of the $%.2f budget; refusals %v",
		run.served, run.spent, budgetUSD, run.refusals)
	if run.spent > budgetUSD+1e-9 {
		t.Errorf("the providers served $%.4f to a caller with a $%.2f budget across them", run.spent, budgetUSD)
	}
	if run.spent < 0.8*budgetUSD {
		t.Errorf("only $%.4f of $%.2f spent before the refusals: refused early", run.spent, budgetUSD)
	}
	for _, u := range run.unexpected {
		t.Error(u)
	}
	for _, f := range fakes {
		if st := f.fake.Stats(); st.Served == 0 {
			t.Errorf("%s's account served none of the budgeted caller's requests: %+v", f.name, st.ByPath)
		}
	}

	// The cap, across the three: 9 requests at once, 3 to each.
	seen.peak.Store(0)
	var capped sync.WaitGroup
	statuses := make(chan int, 9)
	for n := range 9 {
		capped.Go(func() {
			shape := providerShapes[n%len(providerShapes)]
			status, _, _ := post(t, client, procsUp[n%len(procsUp)].URL+shape.path, fmt.Sprintf(shape.body, 20, n),
				map[string]string{"Authorization": "Bearer " + chatKey})
			statuses <- status
		})
	}
	capped.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("a capped request was answered %d, want 200 once the cap had room", s)
		}
	}
	if peak := seen.peak.Load(); peak > providersCapped {
		t.Errorf("chat-frontend had %d requests in flight across the three providers at once, its cap is %d", peak, providersCapped)
	} else {
		t.Logf("chat-frontend's 9 requests across the three providers: at most %d in flight at once (cap %d)", peak, providersCapped)
	}

	// Each account saw its own family's paths alone, with its own key.
	for _, f := range fakes {
		for _, r := range f.fake.Requests() {
			if got := r.Header.Get(f.header); got != f.key {
				t.Errorf("%s's account: %s %s carried %s %q, want the account's own key", f.name, r.Method, r.Path, f.header, redact(got))
			}
			for _, h := range []string{"Authorization", "Api-Key", "X-Api-Key"} {
				if h != f.header && r.Header.Get(h) != "" {
					t.Errorf("%s's account: %s carried %s too", f.name, r.Path, h)
				}
			}
			if want := map[string]string{"openai": "/v1/chat", "azure": "/openai/", "anthropic": "/v1/messages"}[f.name]; !strings.HasPrefix(r.Path, want) {
				t.Errorf("%s's account was sent %s", f.name, r.Path)
			}
		}
	}

	// A path of an API no account serves: refused, counted, sent nowhere.
	before := 0
	for _, f := range fakes {
		before += f.fake.Stats().Requests
	}
	status, _, b := post(t, client, procsUp[0].URL+"/v1beta/models/gemini-2.5-flash:generateContent",
		`{"contents":[{"parts":[{"text":"hi"}]}]}`, map[string]string{"Authorization": "Bearer " + chatKey})
	if status != http.StatusNotFound || !strings.Contains(string(b), "no_account") {
		t.Errorf("a Gemini path with no Gemini account: %d %s, want 404 no_account", status, b)
	}
	after := 0
	for _, f := range fakes {
		after += f.fake.Stats().Requests
	}
	if after != before {
		t.Errorf("the refused path reached an account (%d requests before, %d after)", before, after)
	}
	if n := sum(scrape(t, procsUp[0].AdminURL), "meterproxy_refusals_total", map[string]string{"reason": "no_account"}); n != 1 {
		t.Errorf("meterproxy_refusals_total{reason=no_account} = %v, want 1", n)
	}
	var metric float64
	for _, p := range procsUp {
		metric += sum(scrape(t, p.AdminURL), "meterproxy_spend_usd_total", map[string]string{"caller": "nightly-import"})
	}
	if metric < 0.99*run.spent || metric > 1.01*run.spent {
		t.Errorf("meterproxy_spend_usd_total{caller=nightly-import} = $%.4f, want the $%.4f the answers' usage costs, ± 1%%", metric, run.spent)
	}
}
