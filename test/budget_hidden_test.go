package test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 31, item 2: a budget reserved each request's input at its body's
// bytes ÷ 4, but providers bill input the body does not show. Ten
// requests at once, each of a 100-odd-byte body the upstream bills 50,000
// input tokens for, on a $0.10 budget: all were served, $1.26 spent.
const (
	hiddenBudgetUSD = 0.10
	hiddenInput     = 50_000 // the input tokens the upstream reports for each
	hiddenRequests  = 10
)

// hiddenShapes are requests whose input hides behind their bodies, one
// budgeted caller each.
var hiddenShapes = []struct {
	name, path, body string
	api              usage.API
}{
	{"previous_response_id", "/v1/responses", `{"model":"gpt-4o","previous_response_id":"resp_68af0c5e1c8c8190","input":"and then?","max_output_tokens":50}`, usage.Responses},
	{"conversation", "/v1/responses", `{"model":"gpt-4o","conversation":"conv_689667905b048191","input":"go on","max_output_tokens":50}`, usage.Responses},
	{"stored prompt", "/v1/responses", `{"model":"gpt-4o","prompt":{"id":"pmpt_abc123","version":"2"},"max_output_tokens":50}`, usage.Responses},
	{"input_file", "/v1/responses", `{"model":"gpt-4o","max_output_tokens":50,"input":[{"role":"user","content":[{"type":"input_text","text":"sum it up"},{"type":"input_file","file_id":"file-6F2ksmvXxt4VdoqmHRw6kL"}]}]}`, usage.Responses},
	{"file_search", "/v1/responses", `{"model":"gpt-4o","input":"what does the contract say?","max_output_tokens":50,"tools":[{"type":"file_search","vector_store_ids":["vs_1234567890"]}]}`, usage.Responses},
	{"web_search", "/v1/responses", `{"model":"gpt-4o","input":"news today?","max_output_tokens":50,"tools":[{"type":"web_search"}]}`, usage.Responses},
	{"image_url", "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`, usage.ChatCompletions},
	{"anthropic document", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_011CNha8iCJcU1wXNR6q4V8w"}},{"type":"text","text":"sum it up"}]}]}`, usage.Messages},
	{"anthropic web_search", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":50,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"news today?"}]}`, usage.Messages},
}

// hiddenCaller is the name and key of the caller that sends shape i.
func hiddenCaller(i int) (name, key string) {
	return fmt.Sprintf("hidden-%d", i), fmt.Sprintf("sk-hidden-caller-%d", i)
}

// hiddenFleet is two replicas on one Redis in front of one fake provider,
// pricing gpt-4o at $2.50 / $10 and claude-sonnet-4 at $3 / $15 per
// million tokens, with a caller of a $0.10 daily budget for each shape.
func hiddenFleet(t *testing.T) []*procs.Proxy {
	t.Helper()
	srv := redistest.Start(t)
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: 50 * time.Millisecond, NoLog: true}))
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("store.timeout", "1s")
	cfg.set("prices", []map[string]any{
		{"match": []string{"gpt-4o*"}, "input": 2.50, "output": 10.00},
		{"match": []string{"claude-sonnet-4*"}, "input": 3.00, "output": 15.00},
	})
	var callers []map[string]any
	var env, keys []string
	for i := range hiddenShapes {
		name, key := hiddenCaller(i)
		callers = append(callers, map[string]any{"name": name, "key_env": fmt.Sprintf("HIDDEN_%d_KEY", i), "class": "bulk",
			"budget": map[string]any{"usd": hiddenBudgetUSD, "per": "day"}})
		env, keys = append(env, fmt.Sprintf("HIDDEN_%d_KEY=%s", i, key)), append(keys, key)
	}
	cfg.set("callers", callers)
	cfg.set("classes.bulk.max_wait", "30s")
	cfg.set("upstream.api_key", "sk-provider-hidden-input-test")
	cfg.set("classify.unknown_callers", "reject")
	replicas := make([]*procs.Proxy, 2)
	for i := range replicas {
		replicas[i] = startProxy(t, cfg, env, keys...)
	}
	return replicas
}

// TestBudgetBoundsHiddenInput: for each way a body hides the input it is
// billed for, ten requests at once through a fleet of two, the upstream
// reporting 50,000 input tokens for each ($0.125 at gpt-4o's price, $0.15
// at Claude's): what the upstream served the caller, and what its budget
// recorded, pass the $0.10 budget by at most one request's cost; the rest
// are refused as budget_exceeded. Before the fix every request was
// reserved at its body's bytes ÷ 4 (under a tenth of a cent) and all ten
// were served: $1.25 spent of $0.10.
func TestBudgetBoundsHiddenInput(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of two; skipped with -short")
	}
	t.Parallel()
	replicas := hiddenFleet(t)
	client := newClient(t, hiddenRequests)
	for i, shape := range hiddenShapes {
		t.Run(shape.name, func(t *testing.T) {
			name, key := hiddenCaller(i)
			var mu sync.Mutex
			var spent, dearest float64
			answers := map[string]int{}
			var wg sync.WaitGroup
			for n := range hiddenRequests {
				wg.Go(func() {
					status, hdr, body := post(t, client, replicas[n%len(replicas)].URL+shape.path, shape.body,
						map[string]string{"Authorization": "Bearer " + key, "X-Api-Key": key, fakeprovider.HeaderInputTokens: fmt.Sprint(hiddenInput)})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case status == http.StatusOK:
						m := usage.NewMeter(shape.api, hdr.Get("Content-Type"), 0)
						_, _ = m.Write(body)
						u := m.Finish(true)
						cost := hiddenPriced(shape.api, u)
						spent, dearest = spent+cost, max(dearest, cost)
						answers["200"]++
					case status == http.StatusTooManyRequests && strings.Contains(string(body), "budget") && strings.Contains(string(body), "is spent"):
						answers["429 budget_exceeded"]++
					default:
						answers[fmt.Sprintf("%d %s", status, body)]++
					}
				})
			}
			wg.Wait()
			recorded := recordedSpend(t, replicas[0], name)
			t.Logf("answers %v; the upstream served $%.4f (the dearest $%.4f); the budget recorded $%.4f of $%.2f", answers, spent, dearest, recorded, hiddenBudgetUSD)
			if answers["200"] == 0 || answers["200"]+answers["429 budget_exceeded"] != hiddenRequests {
				t.Errorf("answers %v, want some served and the rest refused as budget_exceeded", answers)
			}
			if limit := hiddenBudgetUSD + dearest + 1e-9; spent > limit || recorded > limit {
				t.Errorf("$%.4f served and $%.4f recorded on a $%.2f budget: more than the budget and one request's $%.4f", spent, recorded, hiddenBudgetUSD, dearest)
			}
			if recorded < spent-1e-9 {
				t.Errorf("the budget recorded $%.4f for $%.4f served: under-counted", recorded, spent)
			}
		})
	}
}

// hiddenPriced is what usage u of an answer of api costs at the test's
// prices.
func hiddenPriced(api usage.API, u usage.Usage) float64 {
	in, out := 2.50, 10.00
	if api == usage.Messages {
		in, out = 3.00, 15.00
	}
	return (float64(u.Input)*in + float64(u.Output)*out) / 1e6
}

// recordedSpend is what caller's budget spent as the fleet's Redis holds
// it, read once nothing is reserved there any more.
func recordedSpend(t *testing.T, p *procs.Proxy, caller string) float64 {
	t.Helper()
	labels := map[string]string{"budget": "caller:" + caller}
	var spent float64
	waitFor(t, "caller:"+caller+"'s reservations to settle", func() bool {
		m := scrape(t, p.AdminURL)
		spent = sum(m, "meterproxy_budget_spent_usd", labels)
		return spent > 0 && sum(m, "meterproxy_budget_reserved_usd", labels) == 0
	})
	return spent
}
