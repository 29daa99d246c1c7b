package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// checkAccessLine fails unless line has every documented field, of its
// type, and no other; it returns the line decoded.
func checkAccessLine(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	for _, problem := range AccessLineProblems(m) {
		t.Errorf("line %s: %s", line, problem)
	}
	return m
}

// lines are the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// accessProxy is budgetProxy's configuration (gpt-4o priced, caller
// "import" with key sk-import) with an access log writing to out,
// queue lines deep, in front of upstream.
func accessProxy(t *testing.T, upstream http.Handler, out accessOut, queue int) (*testProxy, *AccessLog) {
	t.Helper()
	access := newAccessLog(out, queue, slog.New(slog.DiscardHandler))
	p := newTestProxy(t, proxyOpts{upstream: upstream, environ: map[string]string{"IMPORT": "sk-import"}, access: access,
		mutate: func(_ *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			q.Prices = []price.Price{{Match: []string{"gpt-4o"}, Input: 2.5, Output: 10}}
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
	t.Cleanup(func() { _ = access.Close() })
	return p, access
}

// idUpstream answers as usageUpstream does (10 input, 5 output tokens,
// 3 of them reasoning), naming the model that served it, with its own
// x-request-id, and the X-Request-Id it was sent echoed in
// Seen-Request-Id.
func idUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req_up123")
		w.Header().Set("Seen-Request-Id", r.Header.Get("X-Request-Id"))
		_, _ = io.WriteString(w, `{"object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":3}}}`)
	})
}

func TestAccessLogLines(t *testing.T) {
	out := &syncBuffer{}
	p, access := accessProxy(t, idUpstream(), streamOut{out}, accessQueue)
	post := func(id, body string) (int, http.Header) {
		req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", body)
		req.Header.Set("Authorization", "Bearer sk-import")
		req.Header.Set("Content-Type", "application/json")
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		status, hdr, _ := do(t, req)
		return status, hdr
	}
	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"the secret body"}]}`
	status, hdr := post("abc-123", chat)
	if status != http.StatusOK || hdr.Get("X-Request-Id") != "abc-123" || hdr.Get("Seen-Request-Id") != "abc-123" {
		t.Fatalf("status %d, X-Request-Id %q, upstream saw %q: want 200 and the caller's id both ways",
			status, hdr.Values("X-Request-Id"), hdr.Get("Seen-Request-Id"))
	}
	if got := hdr.Values("X-Provider-Request-Id"); len(got) != 1 || got[0] != "req_up123" {
		t.Errorf("X-Provider-Request-Id %q, want the provider's own id, req_up123", got)
	}
	_, hdr = post(strings.Repeat("x", maxRequestID+1), chat)
	generated := hdr.Get("X-Request-Id")
	if !saneID(generated) || len(generated) > 40 || hdr.Get("Seen-Request-Id") != generated {
		t.Errorf("an id too long got %q answered and %q sent upstream: want one generated", generated, hdr.Get("Seen-Request-Id"))
	}
	if status, _ := post("", `{"model":"gpt-4o","model":"gpt-4o","messages":[]}`); status != http.StatusBadRequest {
		t.Fatalf("a duplicate key: status %d, want 400", status)
	}
	waitFor(t, "three lines", func() bool { return len(lines(out.String())) == 3 })
	if err := access.Close(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, "sk-import") || strings.Contains(text, "secret body") {
		t.Fatalf("the access log holds a key or a body:\n%s", text)
	}
	got := make([]map[string]any, 0, 3)
	for _, l := range lines(text) {
		got = append(got, checkAccessLine(t, l))
	}
	first := got[0]
	want := map[string]any{"schema": 1.0, "kind": "request", "request_id": "abc-123", "provider_request_id": "req_up123",
		"caller": "import", "class": "bulk", "model": "gpt-4o", "api": "chat_completions", "method": "POST",
		"path": "/v1/chat/completions", "status": 200.0, "outcome": "forwarded", "input_tokens": 10.0, "output_tokens": 5.0,
		"model_served": "gpt-4o-2024-08-06", "reasoning_tokens": 3.0,
		"cost_nanodollars": 75000.0, "priced": true, "estimated": false, "stream": false, "bytes_in": float64(len(chat))}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("the forwarded line's %s is %v, want %v", k, first[k], v)
		}
	}
	if got[1]["request_id"] != generated {
		t.Errorf("the second line's request_id is %v, want the one answered, %s", got[1]["request_id"], generated)
	}
	refused := got[2]
	if refused["outcome"] != "refused" || refused["status"] != 400.0 || refused["reason"] == "" || refused["cost_nanodollars"] != 0.0 ||
		refused["model_served"] != "" || refused["reasoning_tokens"] != 0.0 {
		t.Errorf("the refused line: %v", refused)
	}
	// Reconciled: the lines' tokens and cost are the counters'.
	tokens := testutil.ToFloat64(p.handler.m.spent.tokens.WithLabelValues(quota.DefaultAccount, quota.DefaultPool, "bulk", "import", "input", "false"))
	spend := testutil.ToFloat64(p.handler.m.spent.spend.WithLabelValues(quota.DefaultAccount, quota.DefaultPool, "bulk", "import", "false"))
	if logged := first["input_tokens"].(float64) + got[1]["input_tokens"].(float64); logged != tokens {
		t.Errorf("the lines' input tokens sum to %v, meterproxy_tokens_total says %v", logged, tokens)
	}
	if logged := first["cost_usd"].(float64) + got[1]["cost_usd"].(float64); fmt.Sprint(logged) != fmt.Sprint(spend) {
		t.Errorf("the lines' cost sums to %v, meterproxy_spend_usd_total says %v", logged, spend)
	}
}

func TestRequestIDs(t *testing.T) {
	g := &requestIDs{prefix: newIDPrefix()}
	for _, tt := range []struct {
		sent []string
		kept bool
	}{
		{[]string{"abc-123"}, true},
		{[]string{"req_01HX:9f/a+b=c@d.e"}, true},
		{[]string{strings.Repeat("a", maxRequestID)}, true},
		{[]string{strings.Repeat("a", maxRequestID+1)}, false},
		{[]string{""}, false},
		{[]string{"has space"}, false},
		{[]string{`quote"`}, false},
		{[]string{"new\nline"}, false},
		{[]string{"é"}, false},
		{[]string{"a", "b"}, false}, // two: neither is the request's
		{nil, false},
	} {
		hdr := http.Header{}
		for _, v := range tt.sent {
			hdr.Add("X-Request-Id", v)
		}
		id := g.of(hdr)
		if kept := len(tt.sent) > 0 && id == tt.sent[0]; kept != tt.kept {
			t.Errorf("X-Request-Id %q: got %q, kept %v, want kept %v", tt.sent, id, kept, tt.kept)
		}
		if !saneID(id) {
			t.Errorf("X-Request-Id %q: the id %q is not sane", tt.sent, id)
		}
	}
	if a, b := g.next(), g.next(); a == b {
		t.Errorf("two ids made are both %q", a)
	}
	if id := providerRequestID(http.Header{"Request-Id": {"req_011CS"}}); id != "req_011CS" {
		t.Errorf("Anthropic's request-id read as %q", id)
	}
	if id := providerRequestID(http.Header{"Apim-Request-Id": {"bad id"}}); id != "" {
		t.Errorf("an insane provider id read as %q, want none", id)
	}
}

// blockedOut is an output whose writes wait until free is closed; in
// says a write began.
type blockedOut struct {
	syncBuffer
	in   chan struct{}
	free chan struct{}
	once sync.Once
}

func (o *blockedOut) Write(p []byte) (int, error) {
	o.once.Do(func() { close(o.in) })
	<-o.free
	return o.syncBuffer.Write(p)
}

func (*blockedOut) reopen() error { return nil }
func (*blockedOut) close() error  { return nil }

func TestAccessLogFullQueueDropsAndCounts(t *testing.T) {
	out := &blockedOut{in: make(chan struct{}), free: make(chan struct{})}
	p, access := accessProxy(t, usageUpstream(), out, 1)
	send := func() {
		if status, _ := p.send(t, http.MethodPost, "/v1/chat/completions", "sk-import", `{"model":"gpt-4o","messages":[]}`); status != http.StatusOK {
			t.Fatalf("status %d, want 200 while the writer is stuck", status)
		}
	}
	send()
	<-out.in // the first line is being written, and the write is stuck
	send()
	waitFor(t, "the second line queued", func() bool { return len(access.queue) == 1 })
	send() // answered all the same: its line is dropped, and counted
	dropped := func() float64 { return testutil.ToFloat64(p.handler.m.accessDropped) }
	waitFor(t, "a line dropped", func() bool { return dropped() == 1 })
	close(out.free)
	if err := access.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(lines(out.String())); n != 2 || dropped() != 1 {
		t.Errorf("%d lines written and %v dropped, want 2 and 1", n, dropped())
	}
}

func TestAccessLogReopenAndClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	f, err := openAccessFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := newAccessLog(&fileOut{path: path, f: f}, accessQueue, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = l.Close() })
	line := func(id string) {
		if !l.send(accessRecord{requestID: id, kind: kindRequest, time: time.Now()}) {
			t.Fatalf("line %s not queued", id)
		}
	}
	for i := range 50 {
		line(fmt.Sprintf("before-%d", i))
	}
	// logrotate: move the file, then ask for the reopen.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		line(fmt.Sprintf("after-%d", i))
	}
	if err := l.Close(); err != nil { // every queued line written first
		t.Fatal(err)
	}
	if l.send(accessRecord{}) {
		t.Error("a line was queued after Close")
	}
	for file, prefix := range map[string]string{path + ".1": "before-", path: "after-"} {
		ids := readIDs(t, file)
		if len(ids) != 50 {
			t.Errorf("%s holds %d lines, want 50", file, len(ids))
		}
		for i, id := range ids {
			if id != fmt.Sprintf("%s%d", prefix, i) {
				t.Errorf("%s line %d is %s, want %s%d", file, i, id, prefix, i)
				break
			}
		}
	}
}

// readIDs returns the request ids of the access log file's lines.
func readIDs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := checkAccessLine(t, sc.Text())
		ids = append(ids, m["request_id"].(string))
	}
	return ids
}

// TestAccessLineProblems: the schema check names a field missing, one of
// another type, a null, and one the schema does not have; a line as
// documented has none.
func TestAccessLineProblems(t *testing.T) {
	line := map[string]any{}
	for name, kind := range AccessFieldTypes {
		line[name] = map[string]any{"string": "", "number": 0.0, "bool": false}[kind]
	}
	if p := AccessLineProblems(line); len(p) != 0 {
		t.Fatalf("a documented line: %v", p)
	}
	delete(line, "caller")
	line["status"], line["tier"], line["secret"] = "200", nil, 1.0
	p := AccessLineProblems(line)
	slices.Sort(p)
	want := []string{"caller is missing, want string", "status is string, want number", "tier is null, want string", "undocumented field secret"}
	if !slices.Equal(p, want) {
		t.Errorf("problems %q, want %q", p, want)
	}
}

// TestAccessLogBytesInAsSent: bytes_in is the body the client sent, not
// the one meterproxy forwarded after injecting stream_options.
func TestAccessLogBytesInAsSent(t *testing.T) {
	out := &syncBuffer{}
	access := newAccessLog(streamOut{out}, accessQueue, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = access.Close() })
	var forwarded atomic.Int64
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		forwarded.Store(n)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	})
	p := newTestProxy(t, proxyOpts{upstream: upstream, environ: map[string]string{"IMPORT": "sk-import"}, access: access,
		mutate: func(c *Config, _ *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			c.Upstream.InjectStreamUsage = true
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
	const sent = `{"model":"gpt-4o","stream":true,"messages":[]}`
	req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", sent)
	req.Header.Set("Authorization", "Bearer sk-import")
	req.Header.Set("Content-Type", "application/json")
	if status, _, body := do(t, req); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	waitFor(t, "the line", func() bool { return len(lines(out.String())) == 1 })
	line := checkAccessLine(t, lines(out.String())[0])
	if forwarded.Load() <= int64(len(sent)) {
		t.Fatalf("meterproxy forwarded %d bytes: no stream_options injected, the test shows nothing", forwarded.Load())
	}
	if line["bytes_in"] != float64(len(sent)) {
		t.Errorf("bytes_in %v, want the %d bytes the client sent (%d were forwarded)", line["bytes_in"], len(sent), forwarded.Load())
	}
}
