package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
)

// usageUpstream answers every request 200 with a chat completion that
// reports 10 input and 5 output tokens.
func usageUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)
	})
}

// budgetProxy is a proxy in pass-through mode (no provider key) with
// gpt-4o priced at $2.50 and $10 per million tokens, bulk budgeted at
// bulkUSD a day (none when 0), and a configured bulk caller "import" (key
// sk-import) with budget.
func budgetProxy(t *testing.T, bulkUSD float64, budget classify.Budget) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: usageUpstream(), environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(_ *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			q.Prices = []price.Price{{Match: []string{"gpt-4o"}, Input: 2.5, Output: 10}}
			if bulkUSD > 0 {
				q.Classes.Bulk.Budget = classify.Budget{USD: bulkUSD, Per: classify.PerDay}
			}
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk, Budget: budget}}
		}})
}

// send posts body to path with key and returns the status and body.
func (p *testProxy) send(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	req := newRequest(t, method, p.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	status, _, raw := do(t, req)
	return status, string(raw)
}

// budgetState is budget's period as the budget gate last read it.
func (p *testProxy) budgetState(t *testing.T, budget string) gate.BudgetState {
	t.Helper()
	for _, b := range p.admitter.State().Budgets {
		if b.Budget == budget {
			return b
		}
	}
	t.Fatalf("no budget %s in the state", budget)
	return gate.BudgetState{}
}

// TestBudgetsHoldOnlyThisAccount (issue 31 item 5a): in pass-through mode
// an unknown caller spends its own key, another account: no budget here
// counts that spend (nor does meterproxy_spend_usd_total), so none holds
// it — its class's budget neither reserves for it nor refuses it, and is
// left as it was. Before, it reserved its worst case on the class's
// budget, which refused it as spent though its spend was never counted
// (and, while it ran, held room from the class's own callers). A
// configured caller's key is this account's: the class's budget holds it.
func TestBudgetsHoldOnlyThisAccount(t *testing.T) {
	p := budgetProxy(t, 0.0005, classify.Budget{}) // less than any request's worst case
	const chat = `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 3 {
		if status, body := p.send(t, http.MethodPost, "/v1/chat/completions", "sk-stranger", chat); status != http.StatusOK {
			t.Fatalf("an unknown caller's request %d with its own key: %d %s, want 200 (no budget here holds another account)", i, status, body)
		}
	}
	if status, body := p.send(t, http.MethodPost, "/v1/chat/completions", "sk-import", chat); status != http.StatusTooManyRequests ||
		!strings.Contains(body, reasonBudgetExceeded) {
		t.Errorf("the configured bulk caller: %d %s, want 429 budget_exceeded (class:bulk holds this account's spend)", status, body)
	}
	waitFor(t, "class:bulk read", func() bool { return len(p.admitter.State().Budgets) > 0 })
	if b := p.budgetState(t, "class:bulk"); b.Spent != 0 || b.Reserved != 0 {
		t.Errorf("class:bulk holds %+v, want nothing spent or reserved", b)
	}
}

// TestBudgetsPriceEveryGeneration (issue 31 item 5b): a request that may
// cost money is held by its budgets whether or not it names a model: a
// Responses request that runs a stored prompt and names no model cannot
// be priced, and is refused unpriced_model (saying it names no model)
// unless the budget's unpriced is allow. Before, a request that named no
// model was taken to generate nothing, and passed every budget free. A
// read of a stored response still passes a spent budget.
func TestBudgetsPriceEveryGeneration(t *testing.T) {
	const stored = `{"prompt":{"id":"pmpt_123","version":"2"},"input":"hi"}`
	for _, tt := range []struct {
		name     string
		unpriced classify.UnpricedPolicy
		status   int
		mentions string
	}{
		{"refuse", classify.UnpricedRefuse, http.StatusBadRequest, "budget caller:import cannot price this request: it names no model"},
		{"allow", classify.UnpricedAllow, http.StatusOK, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := budgetProxy(t, 0, classify.Budget{USD: 1, Per: classify.PerDay, Unpriced: tt.unpriced})
			status, body := p.send(t, http.MethodPost, "/v1/responses", "sk-import", stored)
			if status != tt.status || !strings.Contains(body, tt.mentions) || (status != http.StatusOK && !strings.Contains(body, reasonUnpricedModel)) {
				t.Errorf("a stored prompt without a model: %d %s, want %d mentioning %q", status, body, tt.status, tt.mentions)
			}
		})
	}
	p := budgetProxy(t, 0, classify.Budget{USD: 0.0001, Per: classify.PerDay}) // less than any generation's worst case
	if status, body := p.send(t, http.MethodGet, "/v1/responses/resp_123", "sk-import", ""); status != http.StatusOK {
		t.Errorf("reading a stored response on a budget too small for any generation: %d %s, want 200", status, body)
	}
	if status, body := p.send(t, http.MethodPost, "/v1/responses", "sk-import", `{"model":"gpt-4o","input":"hi"}`); status != http.StatusTooManyRequests {
		t.Errorf("a generation on that budget: %d %s, want 429", status, body)
	}
}

// TestShadowBudgetsUnmeteredAPIs: in mode shadow a request on an API
// meterproxy cannot price is forwarded, and recorded as what its budget
// would have decided: unmetered_api where the budget refuses such APIs;
// where its unpriced_apis is worst_case, admitted. Either way its worst
// case, which the spend metric counts (estimated), is charged to the
// budget: the request was forwarded and spent it (issue 37 item 1).
func TestShadowBudgetsUnmeteredAPIs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		policy  classify.UnpricedAPIPolicy
		outcome string
	}{
		{"refuse", classify.UnpricedAPIRefuse, shadowUnmetered},
		{"worst_case", classify.UnpricedAPIWorstCase, shadowAdmitted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := budgetProxy(t, 0, classify.Budget{USD: 1, Per: classify.PerDay, UnpricedAPIs: tt.policy})
			live := *p.handler.live.Load()
			live.Shadow = true
			p.handler.Reconfigure(live)
			if status, body := p.send(t, http.MethodPost, "/v1/images/generations", "sk-import", `{"model":"gpt-4o","prompt":"sheep"}`); status != http.StatusOK {
				t.Fatalf("in shadow mode: %d %s, want it forwarded", status, body)
			}
			outcome := map[string]string{"class": "bulk", "outcome": tt.outcome}
			waitFor(t, "the shadow decision "+tt.outcome, func() bool { return sumSeries(t, p, "meterproxy_shadow_decisions_total", outcome) == 1 })
			worst := sumSeries(t, p, "meterproxy_spend_usd_total", map[string]string{"caller": "import", "estimated": "true"})
			if worst <= 0 {
				t.Fatalf("meterproxy_spend_usd_total{estimated=true} = %v, want the request's worst case", worst)
			}
			// Forwarded, it spent its worst case as far as the proxy can
			// tell, whatever the decision: the budget is charged that.
			waitFor(t, "the budget charged what was spent", func() bool { return p.budgetState(t, "caller:import").Spent == worst })
		})
	}
}
