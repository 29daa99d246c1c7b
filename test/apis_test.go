package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// Issue 31 item 1: every API a budget meets is priced, or refused. Each
// priced API below has a budgeted caller of its own (key apiKey(i)), with
// apiBudgetUSD a day; "media" has a budget that refuses APIs meterproxy
// cannot price, "worst" one whose unpriced_apis is worst_case.
const (
	apiBudgetUSD = 0.3
	embedPriceIn = 1000.0 // USD per million input tokens of text-embedding-3-small; no output
	apiMaxTokens = 60
)

// pricedAPI is a path whose answers report usage, and a body for it
// (request n, output cap %d where it has one).
type pricedAPI struct {
	path, body string
	api        usage.API
}

var pricedAPIs = []pricedAPI{
	{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":%d,"messages":[{"role":"user","content":"count the sheep, request %d"}]}`, usage.ChatCompletions},
	{"/v1/completions", `{"model":"gpt-4o","max_tokens":%d,"prompt":"count the sheep, request %d"}`, usage.Completions},
	{"/v1/completions", `{"model":"gpt-4o","max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"prompt":"stream the sheep, request %d"}`, usage.Completions},
	{"/openai/v1/chat/completions", `{"model":"gpt-4o","max_tokens":%d,"messages":[{"role":"user","content":"count the sheep, request %d"}]}`, usage.ChatCompletions},
	{"/openai/v1/responses", `{"model":"gpt-4o","max_output_tokens":%d,"input":"count the sheep, request %d"}`, usage.Responses},
	{"/openai/v1/embeddings", `{"model":"text-embedding-3-small","input":"sheep %[2]d, and the output cap %[1]d is not one of its fields"}`, usage.Embeddings},
	{"/openai/responses", `{"model":"gpt-4o","max_output_tokens":%d,"input":"count the sheep, request %d"}`, usage.Responses},
	{"/openai/deployments/gpt-4o-instruct/completions", `{"max_tokens":%d,"prompt":"count the sheep, request %d"}`, usage.Completions},
}

func apiKey(i int) string { return fmt.Sprintf("sk-e2e-api-%02d-cccccccccccccccc", i) }

const (
	mediaKey = "sk-e2e-api-media-dddddddddddddd"
	worstKey = "sk-e2e-api-worst-eeeeeeeeeeeeee"
)

// apisProxy starts a proxy in front of a fake provider with the callers
// above, chat-frontend (interactive, no budget), and dall-e-3 drawing on
// a pool of 600 tokens a minute.
func apisProxy(t *testing.T) *procs.Proxy {
	t.Helper()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, NoLog: true}))
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("prices", []map[string]any{
		{"match": []string{"gpt-4o*"}, "input": budgetPriceIn, "output": budgetPriceOut},
		{"match": []string{"text-embedding-3-small"}, "input": embedPriceIn},
		{"match": []string{"claude-sonnet-4*"}, "input": budgetPriceIn, "output": budgetPriceOut},
		{"match": []string{"gpt-image-1"}, "input": budgetPriceIn, "output": budgetPriceOut, "max_output": 100},
	})
	budget := map[string]any{"usd": apiBudgetUSD, "per": "day"}
	callers := []map[string]any{{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"}}
	environ := []string{"CHAT_KEY=" + chatKey, "MEDIA_KEY=" + mediaKey, "WORST_KEY=" + worstKey}
	for i := range pricedAPIs {
		callers = append(callers, map[string]any{"name": fmt.Sprintf("api-%d", i), "key_env": fmt.Sprintf("API%d_KEY", i), "class": "bulk", "budget": budget})
		environ = append(environ, fmt.Sprintf("API%d_KEY=%s", i, apiKey(i)))
	}
	callers = append(callers,
		map[string]any{"name": "media", "key_env": "MEDIA_KEY", "class": "bulk", "budget": budget},
		map[string]any{"name": "worst", "key_env": "WORST_KEY", "class": "bulk", "budget": map[string]any{"usd": 1, "per": "day", "unpriced_apis": "worst_case"}})
	cfg.set("callers", callers)
	cfg.set("account.requests_per_minute", 600_000)
	cfg.set("account.models", []map[string]any{{"name": "images", "match": []string{"dall-e-3"}, "tokens_per_minute": 600,
		"requests_per_minute": 600_000, "max_in_flight": 64}})
	cfg.set("classes.interactive.max_wait", "2s")
	cfg.set("classes.bulk.max_wait", "30s")
	cfg.set("upstream.api_key", "sk-provider-apis-test")
	cfg.set("classify.unknown_callers", "reject")
	secrets := []string{chatKey, mediaKey, worstKey}
	for i := range pricedAPIs {
		secrets = append(secrets, apiKey(i))
	}
	return startProxy(t, cfg, environ, secrets...)
}

// apiAnswer is one answer: its status, headers and body.
type apiAnswer struct {
	status int
	header http.Header
	body   []byte
}

// call sends method path with key, body as JSON, and extra headers.
func call(t *testing.T, client *http.Client, p *procs.Proxy, method, path, key, body string, extra map[string]string) apiAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, p.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(res.Body)
	if err := errors.Join(err, res.Body.Close()); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return apiAnswer{res.StatusCode, res.Header, b}
}

// errorCode is an OpenAI-shaped error body's code, type and message.
func errorCode(b []byte) (code, kind, message string) {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Code, e.Error.Type, e.Error.Message
}

// budgetOf is budget's period in p's /admin/state.
func budgetOf(t *testing.T, p *procs.Proxy, budget string) (spent, reserved float64) {
	t.Helper()
	res, err := http.Get(p.AdminURL + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var state struct {
		Budgets []struct {
			Budget   string  `json:"budget"`
			Spent    float64 `json:"spent_usd"`
			Reserved float64 `json:"reserved_usd"`
		} `json:"budgets"`
	}
	if err := json.NewDecoder(res.Body).Decode(&state); err != nil {
		t.Fatal(err)
	}
	for _, b := range state.Budgets {
		if b.Budget == budget {
			return b.Spent, b.Reserved
		}
	}
	t.Fatalf("no budget %s in /admin/state", budget)
	return 0, 0
}

// costOf is what an answer's usage costs at the test's prices.
func costOf(api usage.API, u usage.Usage) float64 {
	if api == usage.Embeddings {
		return float64(u.Input) * embedPriceIn / 1e6
	}
	return priced(u)
}

// TestBudgetsMeterEveryAPI: a budgeted caller's requests on Azure's v1
// API (chat, Responses, embeddings), Azure's Responses path, legacy
// completions (OpenAI's, streamed or not, and an Azure deployment's) are
// priced from the usage their answers report and charged to the budget,
// which stops them as it stops chat: refused 429 budget_exceeded once
// spent, never past it, its spend the answers' cost. Before, every one
// of them but chat was settled at $0 and passed for ever.
func TestBudgetsMeterEveryAPI(t *testing.T) {
	t.Parallel()
	p := apisProxy(t)
	client := newClient(t, 4)
	for i, a := range pricedAPIs {
		t.Run(fmt.Sprintf("%s %d", a.path, i), func(t *testing.T) {
			var cost float64
			served, stopped := 0, false
			for n := 0; n < 100 && !stopped; n++ {
				ans := call(t, client, p, http.MethodPost, a.path, apiKey(i), fmt.Sprintf(a.body, apiMaxTokens, n), nil)
				switch code, _, _ := errorCode(ans.body); {
				case ans.status == http.StatusOK:
					m := usage.NewMeter(a.api, ans.header.Get("Content-Type"), 0)
					_, _ = m.Write(ans.body)
					u := m.Finish(true)
					if u.Estimated {
						t.Fatalf("request %d: an answer without usage: %s", n, ans.body)
					}
					cost += costOf(a.api, u)
					served++
				case ans.status == http.StatusTooManyRequests && code == "budget_exceeded":
					stopped = true
				default:
					t.Fatalf("request %d: %d %s", n, ans.status, ans.body)
				}
			}
			if !stopped || served < 2 {
				t.Fatalf("%d answers served, stopped by the budget: %v; want a few served, then 429 budget_exceeded", served, stopped)
			}
			budget := fmt.Sprintf("caller:api-%d", i)
			waitFor(t, budget+"'s spend in /admin/state", func() bool {
				spent, reserved := budgetOf(t, p, budget)
				return reserved == 0 && math.Abs(spent-cost) < 1e-8*float64(served+1)
			})
			t.Logf("%d answers served, $%.4f of the $%.2f budget, then refused", served, cost, apiBudgetUSD)
			if cost > apiBudgetUSD {
				t.Errorf("$%.4f served on a $%.2f budget", cost, apiBudgetUSD)
			}
		})
	}
	// What costs nothing passes a spent budget: the model list, the token
	// counts. Before, a token count that named its model reserved like a
	// generation and was refused.
	for _, free := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/models", ""},
		{http.MethodPost, "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodPost, "/v1/responses/input_tokens", `{"model":"gpt-4o","input":"hi"}`},
	} {
		if ans := call(t, client, p, free.method, free.path, apiKey(0), free.body, nil); ans.status != http.StatusOK {
			t.Errorf("%s %s on a spent budget: %d %s, want 200", free.method, free.path, ans.status, ans.body)
		}
	}
}

// TestBudgetsRefuseUnpricedAPIs: a request that may cost money on an API
// meterproxy cannot price (images, speech; the answers report no usage)
// is refused 400 unmetered_api by a budget — in the provider's error
// shape, naming the path and budget.unpriced_apis, not retried — while a
// caller without a budget is served and its pool's token window charged
// the request's estimate. A budget with unpriced_apis: worst_case lets it
// through and settles it at its reservation, which the spend metric counts
// as estimated (a model it cannot price is still refused unpriced_model).
// Before, every such request of a priced model was reserved, forwarded and
// settled at $0.
func TestBudgetsRefuseUnpricedAPIs(t *testing.T) {
	t.Parallel()
	p := apisProxy(t)
	client := newClient(t, 4)
	prompt := strings.Repeat("a watercolour of sheep in a field, ", 60) // about 2,000 bytes: some 500 tokens estimated
	image := `{"model":"dall-e-3","prompt":"` + prompt + `"}`
	// Models a price matches (gpt-image-1, gpt-4o*), so that before, their
	// budget reserved them and settled them at $0; and a deployment none
	// matches, refused for its API before its model.
	unpriced := []struct{ path, body string }{
		{"/v1/images/generations", `{"model":"gpt-image-1","prompt":"sheep"}`},
		{"/v1/audio/speech", `{"model":"gpt-4o-mini-tts","input":"count the sheep","voice":"alloy"}`},
		{"/openai/deployments/dall-e-3/images/generations", `{"prompt":"sheep"}`},
	}
	for _, u := range unpriced {
		ans := call(t, client, p, http.MethodPost, u.path, mediaKey, u.body, nil)
		code, kind, msg := errorCode(ans.body)
		if ans.status != http.StatusBadRequest || code != "unmetered_api" || kind != "invalid_request_error" ||
			!strings.Contains(msg, "POST "+u.path) || !strings.Contains(msg, "budget.unpriced_apis") || ans.header.Get("X-Should-Retry") != "false" {
			t.Errorf("budgeted %s: %d %s (x-should-retry %q), want 400 unmetered_api naming the path and budget.unpriced_apis",
				u.path, ans.status, ans.body, ans.header.Get("X-Should-Retry"))
		}
	}
	if n := sum(scrape(t, p.AdminURL), "meterproxy_refusals_total", map[string]string{"reason": "unmetered_api"}); n != float64(len(unpriced)) {
		t.Errorf("meterproxy_refusals_total{reason=unmetered_api} = %v, want %d", n, len(unpriced))
	}
	// No budget: served; the image's estimate (some 500 tokens) is charged
	// to its pool's 10 tokens a second, so the next waits far past
	// interactive's max_wait.
	for _, u := range unpriced[1:] {
		if ans := call(t, client, p, http.MethodPost, u.path, chatKey, u.body, nil); ans.status != http.StatusOK {
			t.Errorf("without a budget, %s: %d %s, want 200", u.path, ans.status, ans.body)
		}
	}
	if ans := call(t, client, p, http.MethodPost, "/v1/images/generations", chatKey, image, nil); ans.status != http.StatusOK {
		t.Fatalf("without a budget, the first image: %d %s, want 200", ans.status, ans.body)
	}
	if ans := call(t, client, p, http.MethodPost, "/v1/images/generations", chatKey, image, nil); ans.status != http.StatusTooManyRequests {
		t.Errorf("the second image at once: %d %s, want 429 (the first's estimate charged to the pool's tokens)", ans.status, ans.body)
	}
	// worst_case: reserved, then settled at the reservation.
	done := make(chan apiAnswer, 1)
	go func() {
		status, header, body, err := postFull(t, client, p.URL+"/v1/images/generations", `{"model":"gpt-image-1","prompt":"sheep"}`,
			map[string]string{"Authorization": "Bearer " + worstKey, fakeprovider.HeaderLatency: "3s"})
		if err != nil {
			body = []byte(err.Error())
		}
		done <- apiAnswer{status, header, body}
	}()
	var reserved float64
	waitFor(t, "the image's reservation in /admin/state", func() bool {
		_, reserved = budgetOf(t, p, "caller:worst")
		return reserved > 0
	})
	if ans := <-done; ans.status != http.StatusOK {
		t.Fatalf("an image on a worst_case budget: %d %s, want 200", ans.status, ans.body)
	}
	waitFor(t, "the image settled at its reservation", func() bool {
		spent, held := budgetOf(t, p, "caller:worst")
		return held == 0 && spent == reserved
	})
	t.Logf("an image on a worst_case budget: reserved and charged $%.6f", reserved)
	if got := sum(scrape(t, p.AdminURL), "meterproxy_spend_usd_total", map[string]string{"caller": "worst", "estimated": "true"}); math.Abs(got-reserved) > 1e-9 {
		t.Errorf("meterproxy_spend_usd_total{caller=worst,estimated=true} = $%.6f, want the $%.6f charged", got, reserved)
	}
	ans := call(t, client, p, http.MethodPost, "/v1/images/generations", worstKey, `{"model":"dall-e-2","prompt":"sheep"}`, nil)
	if code, _, _ := errorCode(ans.body); ans.status != http.StatusBadRequest || code != "unpriced_model" {
		t.Errorf("a model no price matches on a worst_case budget: %d %s, want 400 unpriced_model", ans.status, ans.body)
	}
}
