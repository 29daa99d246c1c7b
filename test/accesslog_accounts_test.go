package test

import (
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 34 part 2 over several accounts: a request spilled from one
// account to another is logged once, under the account that served it,
// and the lines' tokens and cost are the counters' account by account.

// TestAccessLogSpillsToAnotherAccount: two accounts of one provider on
// one Redis; the first's fake allows one request a minute (its 429 after
// that is certain within the run), so the interactive requests after the
// first spill to the second. A bulk request, which only the second
// serves, is sent at flex while the second has no flex capacity, and
// retried. Each line names the account that answered, its spills and
// flex retries, the status and provider id its client got; the lines'
// tokens and cost sum to meterproxy_tokens_total and
// meterproxy_spend_usd_total per account.
func TestAccessLogSpillsToAnotherAccount(t *testing.T) {
	t.Parallel()
	const firstKey, secondKey = "sk-account-first-gggggggggggggggggg", "sk-account-second-hhhhhhhhhhhhhhhhh"
	first := fakeprovider.New(fakeprovider.Config{RPM: 1, RequestIDPrefix: "first_", NoLog: true})
	second := fakeprovider.New(fakeprovider.Config{RequestIDPrefix: "second_", NoLog: true})
	firstUp, secondUp := startUpstream(t, first), startUpstream(t, second)
	cfg := fleetConfig(firstUp.URL, redistest.Start(t), redistest.Prefix(t))
	delete(cfg["upstream"].(map[string]any), "url")
	path := filepath.Join(t.TempDir(), "access.log")
	cfg.set("log.access", path)
	cfg.set("upstream.provider", "openai")
	cfg.set("account.expected_replicas", 1)
	cfg.set("classify.unknown_callers", "reject")
	cfg.set("classes.bulk.service_tier", "flex")
	cfg.set("classes.bulk.flex_models", []string{"gpt-4o*"})
	cfg.set("prices", []map[string]any{{"match": []string{"gpt-4o*"}, "input": budgetPriceIn, "output": budgetPriceOut}})
	limits := map[string]any{"requests_per_minute": 600, "max_in_flight": 10}
	cfg.set("upstream.accounts", []map[string]any{
		{"name": "first", "url": firstUp.URL, "api_key_env": "FIRST_KEY", "account": limits, "serves": []string{"interactive"}},
		{"name": "second", "url": secondUp.URL, "api_key_env": "SECOND_KEY", "account": limits, "serves": []string{"interactive", "bulk"}},
	})
	env := append([]string{"FIRST_KEY=" + firstKey, "SECOND_KEY=" + secondKey}, fleetEnv...)
	p := startProxy(t, cfg, env, chatKey, importKey, firstKey, secondKey)
	client := newClient(t, 2)

	type answer struct {
		status     int
		providerID string
	}
	sent := map[string]answer{} // by the request id the answer carried
	record := func(id string, status int, hdr http.Header, body []byte) {
		got := hdr.Get("X-Request-Id")
		if id != "" && got != id || got == "" {
			t.Fatalf("sent X-Request-Id %q, answered %q", id, got)
		}
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", got, status, body)
		}
		sent[got] = answer{status, hdr.Get("X-Provider-Request-Id")}
	}
	send := func(id, key, body string) {
		hdr := map[string]string{}
		if id != "" {
			hdr["X-Request-Id"] = id
		}
		a := call(t, client, p, http.MethodPost, "/v1/chat/completions", key, body, hdr)
		record(id, a.status, a.header, a.body)
	}
	chat := `{"model":"gpt-4o","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	stream := `{"model":"gpt-4o","max_tokens":20,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	send("first-0", chatKey, chat)   // the first account's one request a minute
	send("spill-0", chatKey, chat)   // its 429, moved to the second
	send("spill-1", chatKey, stream) // moved, or sent to the second at once while the first is held
	send("", chatKey, chat)
	send("", chatKey, stream)

	// Flex without capacity at the second: held and retried, then served.
	second.SetFlexUnavailable(1)
	type flexAnswer struct {
		status int
		header http.Header
		body   []byte
		err    error
	}
	flex := make(chan flexAnswer, 1)
	go func() {
		status, hdr, b, err := postFull(t, client, p.URL+"/v1/chat/completions", chat,
			map[string]string{"Authorization": "Bearer " + importKey, "X-Request-Id": "flex-0"})
		flex <- flexAnswer{status, hdr, b, err}
	}()
	waitFor(t, "the flex request retried", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_flex_retries_total", nil) >= 1
	})
	second.SetFlexUnavailable(0)
	fa := <-flex
	if fa.err != nil {
		t.Fatal(fa.err)
	}
	record("flex-0", fa.status, fa.header, fa.body)

	var m procs.Metrics
	waitFor(t, "every request counted", func() bool {
		m = scrape(t, p.AdminURL)
		return sum(m, "meterproxy_requests_total", nil) == float64(len(sent))
	})
	stopAndRead(t, p, path, chatKey, importKey, firstKey, secondKey)

	lines := readAccessLog(t, path)
	if len(lines) != len(sent) {
		t.Errorf("%d lines, want one per request sent (%d)", len(lines), len(sent))
	}
	type totals struct{ in, out, cost float64 }
	byAccount := map[string]*totals{}
	byID := map[string]map[string]any{}
	spilled := 0
	for _, l := range lines {
		id, account := l["request_id"].(string), l["account"].(string)
		byID[id] = l
		a, ok := sent[id]
		if !ok {
			t.Errorf("a line for a request not sent: %v", l)
			continue
		}
		spills := l["spills"].(float64)
		if spills > 0 {
			spilled++
			if account != "second" {
				t.Errorf("%s spilled %v times, logged under %q: want the account that served it, second", id, spills, account)
			}
		}
		if int(l["status"].(float64)) != a.status || l["outcome"] != "forwarded" {
			t.Errorf("%s: status %v outcome %v, the client got %d", id, l["status"], l["outcome"], a.status)
		}
		if pid := l["provider_request_id"].(string); pid != a.providerID || !strings.HasPrefix(pid, account+"_") {
			t.Errorf("%s under %s: provider_request_id %q, the client got %q from the account's fake", id, account, pid, a.providerID)
		}
		if byAccount[account] == nil {
			byAccount[account] = &totals{}
		}
		tot := byAccount[account]
		tot.in += l["input_tokens"].(float64)
		tot.out += l["output_tokens"].(float64)
		tot.cost += l["cost_usd"].(float64)
		if got := l["cost_nanodollars"].(float64) / 1e9; math.Abs(got-l["cost_usd"].(float64)) > 1e-12 {
			t.Errorf("%s: cost_nanodollars %v, cost_usd %v", id, l["cost_nanodollars"], l["cost_usd"])
		}
	}
	if l := byID["first-0"]; l == nil || l["account"] != "first" || l["spills"].(float64) != 0 {
		t.Errorf("the first request's line: %v; want served by first, never spilled", l)
	}
	if l := byID["spill-0"]; l == nil || l["spills"].(float64) != 1 {
		t.Errorf("the request first refused: %v; want spilled once", l)
	}
	if l := byID["flex-0"]; l == nil || l["flex_retries"].(float64) < 1 || l["account"] != "second" || l["tier"] != "flex" {
		t.Errorf("the flex request's line: %v; want at least one flex retry, at second, at flex", l)
	}
	var spills, flexRetries float64
	for _, l := range lines {
		spills += l["spills"].(float64)
		flexRetries += l["flex_retries"].(float64)
	}
	if n := sum(m, "meterproxy_account_spills_total", map[string]string{"account": "first"}); spills != n || n == 0 {
		t.Errorf("the lines' spills sum to %v, meterproxy_account_spills_total{account=first} to %v", spills, n)
	}
	if n := sum(m, "meterproxy_flex_retries_total", nil); flexRetries != n {
		t.Errorf("the lines' flex retries sum to %v, meterproxy_flex_retries_total to %v", flexRetries, n)
	}
	// Reconciled with the counters, account by account.
	for _, account := range []string{"first", "second"} {
		tot := byAccount[account]
		if tot == nil {
			t.Errorf("no line under %s", account)
			continue
		}
		for kind, got := range map[string]float64{"input": tot.in, "output": tot.out} {
			if want := sum(m, "meterproxy_tokens_total", map[string]string{"account": account, "kind": kind}); got != want || want == 0 {
				t.Errorf("%s: the lines' %s tokens sum to %v, meterproxy_tokens_total to %v", account, kind, got, want)
			}
		}
		spend := sum(m, "meterproxy_spend_usd_total", map[string]string{"account": account})
		if math.Abs(tot.cost-spend) > spend*1e-9 || spend == 0 {
			t.Errorf("%s: the lines' cost sums to %v, meterproxy_spend_usd_total to %v", account, tot.cost, spend)
		}
	}
	t.Logf("%d lines, %d spilled; by account %s", len(lines), spilled, func() string {
		var b strings.Builder
		for a, tot := range byAccount {
			fmt.Fprintf(&b, "%s %+v ", a, *tot)
		}
		return b.String()
	}())
}
