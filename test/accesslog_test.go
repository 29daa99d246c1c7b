package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// Issue 34 part 1 and 2: the access log is the usage record — one line
// per request whatever its end, every documented field, no key or body,
// and its tokens and cost the counters' exactly.

// readAccessLog parses the access log at path, checking every line has
// every documented field, typed as documented, and no other.
func readAccessLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		for _, problem := range proxy.AccessLineProblems(m) {
			t.Errorf("line %s: %s", sc.Text(), problem)
		}
		out = append(out, m)
	}
	return out
}

// accessProxy is socketsProxy with the access log in a file, and a
// caller whose budget holds no request.
func accessProxy(t *testing.T, fp *fakeprovider.Provider) (*procs.Proxy, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	p := socketsProxy(t, fp, func(cfg config) {
		cfg.set("log.access", path)
		cfg.set("callers", []map[string]any{
			{"name": "agent", "key_env": "AGENT_KEY", "class": "bulk"},
			{"name": "penny", "key_env": "PENNY_KEY", "class": "bulk", "budget": map[string]any{"usd": 0.000001, "per": "day"}},
		})
		cfg.set("prices", []map[string]any{
			{"match": []string{"gpt-4o*"}, "input": budgetPriceIn, "output": budgetPriceOut},
			{"match": []string{"claude-sonnet-4*"}, "input": budgetPriceIn, "output": budgetPriceOut},
		})
	})
	return p, path
}

func TestAccessLogReconcilesAMixedRun(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, NoLog: true})
	p, path := accessProxy(t, fp)
	client := newClient(t, 4)
	const secret = "the-prompt-nobody-logs"
	sent := map[string]int{} // status by request id
	send := func(id, method, path, key, body string, extra map[string]string) {
		hdr := map[string]string{"X-Request-Id": id}
		for k, v := range extra {
			hdr[k] = v
		}
		a := call(t, client, p, method, path, key, body, hdr)
		sent[id] = a.status
		if got := a.header.Get("X-Request-Id"); got != id {
			t.Errorf("%s: answered X-Request-Id %q", id, got)
		}
	}
	chat := `{"model":"gpt-4o","max_tokens":20,"messages":[{"role":"user","content":"` + secret + `"}]}`
	stream := `{"model":"gpt-4o","max_tokens":20,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + secret + `"}]}`
	for i := range 4 {
		send(fmt.Sprintf("plain-%d", i), http.MethodPost, "/v1/chat/completions", agentKey, chat, nil)
		send(fmt.Sprintf("stream-%d", i), http.MethodPost, "/v1/chat/completions", agentKey, stream, nil)
	}
	send("anthropic-0", http.MethodPost, "/v1/messages", agentKey,
		`{"model":"claude-sonnet-4-5","max_tokens":20,"messages":[{"role":"user","content":"`+secret+`"}]}`, map[string]string{"Anthropic-Version": "2023-06-01"})
	send("unknown-0", http.MethodPost, "/v1/chat/completions", "sk-e2e-nobody-ffffffffffffffff", chat, nil)
	send("budget-0", http.MethodPost, "/v1/chat/completions", pennyKey, chat, nil)
	send("negotiated-0", http.MethodGet, "/v1/chat/completions", agentKey, "", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"})
	want := map[string]struct {
		status          int
		outcome, reason string
	}{
		"unknown-0": {401, "refused", "unknown_caller"}, "budget-0": {429, "refused", "budget_exceeded"},
		"negotiated-0": {426, "negotiated", "upgrade_required"}, "anthropic-0": {200, "forwarded", ""},
	}
	cutShort(t, p, stream)
	c := openSocket(t, p, agentKey)
	if events := sendTurn(t, c, createTurn(0, "")); events[len(events)-1].typ() != "response.completed" {
		t.Fatalf("the turn ended with %v", events[len(events)-1])
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatal(err)
	}
	socketsQuiet(t, p)
	var m procs.Metrics
	waitFor(t, "the cut stream counted", func() bool {
		m = scrape(t, p.AdminURL)
		return sum(m, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}) == 1 &&
			sum(m, "meterproxy_requests_total", nil) == float64(len(sent)-1+2) // less the negotiation; the cut and the turn
	})
	raw := stopAndRead(t, p, path, agentKey, pennyKey, "sk-e2e-nobody-ffffffffffffffff", "sk-provider-socket-test")
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "sheep") {
		t.Fatal("the access log holds a body")
	}
	lines := readAccessLog(t, path)
	byID := map[string]map[string]any{}
	var in, out, cost float64
	var nanos int64
	kinds := map[string]int{}
	for _, l := range lines {
		byID[l["request_id"].(string)] = l
		kinds[l["kind"].(string)]++
		in += l["input_tokens"].(float64)
		out += l["output_tokens"].(float64)
		if l["reasoning_tokens"].(float64) > l["output_tokens"].(float64) {
			t.Errorf("%s: reasoning tokens %v over the output's %v", l["request_id"], l["reasoning_tokens"], l["output_tokens"])
		}
		if l["kind"] == "request" && l["status"] == 200.0 && l["estimated"] == false && l["api"] != "other" && l["model_served"] == "" {
			t.Errorf("%s: a %s answer metered whole names no model_served", l["request_id"], l["api"])
		}
		cost += l["cost_usd"].(float64)
		nanos += int64(l["cost_nanodollars"].(float64))
	}
	if len(lines) != len(sent)+3 || kinds["turn"] != 1 || kinds["session"] != 1 {
		t.Errorf("%d lines (%v), want one per request sent (%d), the cut stream, the turn and the session", len(lines), kinds, len(sent))
	}
	for id, status := range sent {
		l, ok := byID[id]
		if !ok {
			t.Errorf("no line for %s", id)
			continue
		}
		if int(l["status"].(float64)) != status {
			t.Errorf("%s: status %v, the client got %d", id, l["status"], status)
		}
		if w, ok := want[id]; ok && (l["outcome"] != w.outcome || l["reason"] != w.reason || status != w.status) {
			t.Errorf("%s: %v %v %v, want %+v", id, status, l["outcome"], l["reason"], w)
		}
	}
	if l := byID["cut-0"]; l == nil || l["cut"] != "client" || l["outcome"] != "forwarded" || l["estimated"] != true {
		t.Errorf("the cut stream's line: %v", l)
	}
	if l := byID["anthropic-0"]; l["api"] != "messages" || l["input_tokens"].(float64) == 0 || l["provider_request_id"] == "" {
		t.Errorf("the Anthropic line: %v", l)
	}
	// Reconciled with the counters.
	if want := sum(m, "meterproxy_tokens_total", map[string]string{"kind": "input"}); in != want {
		t.Errorf("the lines' input tokens sum to %v, meterproxy_tokens_total to %v", in, want)
	}
	if want := sum(m, "meterproxy_tokens_total", map[string]string{"kind": "output"}); out != want {
		t.Errorf("the lines' output tokens sum to %v, meterproxy_tokens_total to %v", out, want)
	}
	spend := sum(m, "meterproxy_spend_usd_total", nil)
	if math.Abs(cost-spend) > spend*1e-9 || math.Abs(float64(nanos)/1e9-spend) > spend*1e-9 || spend == 0 {
		t.Errorf("the lines' cost sums to %v (%d nanodollars), meterproxy_spend_usd_total to %v", cost, nanos, spend)
	}
}

// cutShort sends the stream body as cut-0, which the provider never
// ends, and goes away after its first bytes: a stream the client cut.
func cutShort(t *testing.T, p *procs.Proxy, body string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+agentKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "cut-0")
	req.Header.Set("X-Fake-Stall-After", "2") // the provider streams on until the client goes away
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = res.Body.Close()
}

// TestAccessLogLosesNoLineOnSIGTERM: requests in flight when SIGTERM
// comes; every request the client got an answer for has its line once
// the process has exited.
func TestAccessLogLosesNoLineOnSIGTERM(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: 5 * time.Millisecond, NoLog: true})
	p, path := accessProxy(t, fp)
	client := newClient(t, 16)
	var answered sync.Map
	var n, done atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				id := fmt.Sprintf("load-%d", n.Add(1))
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+agentKey)
				req.Header.Set("X-Request-Id", id)
				res, err := client.Do(req)
				if err != nil {
					return // the proxy stopped listening
				}
				_, err = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				if err == nil {
					answered.Store(id, res.StatusCode)
					done.Add(1)
				}
			}
		})
	}
	waitFor(t, "some load answered", func() bool { return done.Load() >= 50 })
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	logged := map[string]bool{}
	for _, l := range readAccessLog(t, path) {
		logged[l["request_id"].(string)] = true
	}
	missing := 0
	answered.Range(func(id, _ any) bool {
		if !logged[id.(string)] {
			missing++
		}
		return true
	})
	if missing > 0 || done.Load() < 50 {
		t.Errorf("%d of %d answered requests have no line", missing, done.Load())
	}
}

// TestAccessLogRotates: logrotate moves the file and sends SIGHUP; the
// next lines go to a new file at the path, and none is lost.
func TestAccessLogRotates(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, NoLog: true})
	p, path := accessProxy(t, fp)
	client := newClient(t, 1)
	chat := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	call(t, client, p, http.MethodPost, "/v1/chat/completions", agentKey, chat, map[string]string{"X-Request-Id": "before"})
	waitFor(t, "the first line written", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), `"before"`)
	})
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the access log reopened", func() bool { return strings.Contains(p.Logs(), "access_log_reopened") })
	call(t, client, p, http.MethodPost, "/v1/chat/completions", agentKey, chat, map[string]string{"X-Request-Id": "after"})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for file, id := range map[string]string{path + ".1": "before", path: "after"} {
		lines := readAccessLog(t, file)
		if len(lines) != 1 || lines[0]["request_id"] != id {
			t.Errorf("%s holds %v, want the one line %s", file, lines, id)
		}
	}
}

// TestAccessLogSchemaTable: docs/records.md's schema table names every field of
// proxy.AccessFieldTypes with its type, and no other.
func TestAccessLogSchemaTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "records.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "### The schema (version 1)")
	if !ok {
		t.Fatal("docs/records.md has no \"### The schema (version 1)\" section")
	}
	table, _, _ = strings.Cut(table, "\n### ")
	documented := map[string]string{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		for name := range strings.SplitSeq(cells[1], ",") {
			documented[strings.Trim(strings.TrimSpace(name), "`")] = strings.TrimSpace(cells[2])
		}
	}
	for name, kind := range proxy.AccessFieldTypes {
		if documented[name] != kind {
			t.Errorf("docs/records.md's schema table gives %q type %q, the log writes %s", name, documented[name], kind)
		}
	}
	for name := range documented {
		if _, ok := proxy.AccessFieldTypes[name]; !ok {
			t.Errorf("docs/records.md's schema table names %q, which no line has", name)
		}
	}
}

// stopAndRead stops p with SIGTERM, which writes every line queued, and
// returns its access log at path, checked to hold none of keys, nor any
// key's first 8 characters or more.
func stopAndRead(t *testing.T, p *procs.Proxy, path string, keys ...string) []byte {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		for n := 8; n <= len(key); n++ {
			if strings.Contains(string(raw), key[:n]) {
				t.Fatalf("the access log holds %q, a key's first %d characters", key[:n], n)
			}
		}
	}
	return raw
}
