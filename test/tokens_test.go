package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// probeCaller is the caller name the token tests configure for callerKey, so
// the caller label of meterproxy_tokens_total is known.
const probeCaller = "token-probe"

// probeConfig forwards to upstreamURL and knows callerKey as probeCaller.
func probeConfig(upstreamURL string) config {
	cfg := baseConfig(upstreamURL)
	cfg.set("callers", []map[string]any{{"name": probeCaller, "key_env": "PROBE_KEY", "class": "interactive"}})
	return cfg
}

var probeEnv = []string{"PROBE_KEY=" + callerKey}

// probeHeaders carry callerKey where the path's provider expects it.
func probeHeaders(path string) map[string]string {
	if path == "/v1/messages" {
		return map[string]string{"X-Api-Key": callerKey, "Anthropic-Version": "2023-06-01"}
	}
	return map[string]string{"Authorization": "Bearer " + callerKey}
}

// tokenCount is one response's (or a metric delta's) tokens.
type tokenCount struct{ in, out int64 }

func (c tokenCount) String() string { return fmt.Sprintf("%d in / %d out", c.in, c.out) }

// tokenMeter reads meterproxy_tokens_total of one caller, split by the
// estimated label.
type tokenMeter struct {
	reported, estimated tokenCount
	requests            int64 // meterproxy_requests_total, every label
}

func readTokens(m procs.Metrics, caller string) tokenMeter {
	get := func(kind, est string) int64 {
		return int64(sum(m, "meterproxy_tokens_total", map[string]string{"caller": caller, "kind": kind, "estimated": est}))
	}
	return tokenMeter{
		reported:  tokenCount{get("input", "false"), get("output", "false")},
		estimated: tokenCount{get("input", "true"), get("output", "true")},
		requests:  int64(sum(m, "meterproxy_requests_total", nil)),
	}
}

func (a tokenMeter) minus(b tokenMeter) tokenMeter {
	return tokenMeter{
		reported:  tokenCount{a.reported.in - b.reported.in, a.reported.out - b.reported.out},
		estimated: tokenCount{a.estimated.in - b.estimated.in, a.estimated.out - b.estimated.out},
		requests:  a.requests - b.requests,
	}
}

// tokensAfter waits until the proxy has counted n more requests than before
// and returns the change in caller's tokens. A request is counted once its
// handler is done, and its tokens before that (at the end of its body): the
// client may hold a whole Content-Length body a moment earlier.
func tokensAfter(t *testing.T, adminURL, caller string, before tokenMeter, n int64) tokenMeter {
	t.Helper()
	var now tokenMeter
	waitFor(t, fmt.Sprintf("the proxy to count %d more request(s)", n), func() bool {
		now = readTokens(scrape(t, adminURL), caller)
		return now.requests-before.requests >= n
	})
	return now.minus(before)
}

// sseEvent is one server-sent event as a client reads it.
type sseEvent struct{ name, data string }

// parseSSE splits an event stream into events (an event the stream ends
// inside, without its blank line, is dropped, as clients do).
func parseSSE(b []byte) []sseEvent {
	var out []sseEvent
	var ev sseEvent
	var data []string
	for line := range strings.SplitSeq(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n") {
		switch {
		case line == "":
			if data != nil || ev.name != "" {
				ev.data = strings.Join(data, "\n")
				out = append(out, ev)
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event:"):
			ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(line, "data:")
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
	return out
}

// isUsageChunk reports whether a chat stream event is the chunk that
// stream_options.include_usage adds: empty choices, non-null usage.
func isUsageChunk(data string) bool {
	if !gjson.Valid(data) {
		return false
	}
	c := gjson.Parse(data)
	return c.Get("choices").IsArray() && len(c.Get("choices").Array()) == 0 && c.Get("usage").IsObject()
}

// billedUsage is the usage a response body reports, read the way each
// provider documents it: chat and embeddings prompt_tokens/completion_tokens
// (the last non-null usage of a stream), Responses input_tokens/output_tokens
// (of response.completed in a stream), Anthropic input_tokens plus both
// cache counts, with message_delta's cumulative counts replacing
// message_start's. ok is false when the body reports none.
func billedUsage(path string, stream bool, body []byte) (tokenCount, bool) {
	var c tokenCount
	found := false
	anthropic := func(u gjson.Result, parts *[3]int64) {
		for i, k := range []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
			if v := u.Get(k); v.Exists() {
				parts[i] = v.Int()
			}
		}
		if v := u.Get("output_tokens"); v.Exists() {
			c.out = v.Int()
		}
		c.in = parts[0] + parts[1] + parts[2]
		found = true
	}
	var parts [3]int64
	if !stream {
		doc := gjson.ParseBytes(body)
		u := doc.Get("usage")
		if !u.IsObject() {
			return c, false
		}
		switch path {
		case "/v1/responses":
			return tokenCount{u.Get("input_tokens").Int(), u.Get("output_tokens").Int()}, true
		case "/v1/messages":
			anthropic(u, &parts)
			return c, true
		default: // chat completions, embeddings
			return tokenCount{u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()}, true
		}
	}
	for _, ev := range parseSSE(body) {
		doc := gjson.Parse(ev.data)
		switch path {
		case "/v1/chat/completions":
			if u := doc.Get("usage"); u.IsObject() {
				c, found = tokenCount{u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()}, true
			}
		case "/v1/responses":
			if typ := doc.Get("type").Str; typ == "response.completed" || typ == "response.incomplete" {
				u := doc.Get("response.usage")
				c, found = tokenCount{u.Get("input_tokens").Int(), u.Get("output_tokens").Int()}, true
			}
		case "/v1/messages":
			switch doc.Get("type").Str {
			case "message_start":
				anthropic(doc.Get("message.usage"), &parts)
			case "message_delta":
				anthropic(doc.Get("usage"), &parts)
			}
		}
	}
	return c, found
}

// cannedAnthropic answers /v1/messages requests that carry X-Test-Canned
// with a fixed body reporting prompt-cache tokens (the fake provider always
// reports 0 for them); everything else goes to next.
func cannedAnthropic(next http.Handler) http.Handler {
	const message = `{"id":"msg_canned","type":"message","role":"assistant","model":"claude-test",` +
		`"content":[{"type":"text","text":"cached hello"}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":7,"cache_creation_input_tokens":1200,"cache_read_input_tokens":34000,"output_tokens":3,"service_tier":"standard"}}`
	stream := strings.Join([]string{
		"event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_canned","type":"message","role":"assistant",` +
			`"model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,` +
			`"usage":{"input_tokens":11,"cache_creation_input_tokens":250,"cache_read_input_tokens":9000,"output_tokens":1}}}`,
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"event: ping\ndata: " + `{"type":"ping"}`,
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cached "}}`,
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`,
		"event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":0}`,
		"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`,
		"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},` +
			`"usage":{"input_tokens":11,"cache_read_input_tokens":9100,"output_tokens":5}}`,
		"event: message_stop\ndata: " + `{"type":"message_stop"}`,
	}, "\n\n") + "\n\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Canned") == "" {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if gjson.GetBytes(body, "stream").Bool() {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, message)
	})
}

// TestTokensMatchWhatTheProviderBilled: for every API meterproxy meters, the
// reported tokens it counts for one request are exactly the usage the
// client received, and nothing is counted as an estimate.
func TestTokensMatchWhatTheProviderBilled(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow})
	up := startUpstream(t, cannedAnthropic(fake))
	p := startProxy(t, probeConfig(up.URL), probeEnv, callerKey)
	client := newClient(t, 2)

	for _, tc := range []struct {
		name, path, body string
		stream, canned   bool
	}{
		{name: "chat json", path: "/v1/chat/completions",
			body: `{"model":"gpt-test","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}`},
		{name: "chat stream with include_usage", path: "/v1/chat/completions", stream: true,
			body: `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there, stream"}]}`},
		{name: "responses json", path: "/v1/responses",
			body: `{"model":"gpt-test","input":[{"role":"user","content":"one"},{"role":"user","content":"two"}]}`},
		{name: "responses stream", path: "/v1/responses", stream: true,
			body: `{"model":"gpt-test","stream":true,"input":"tell me something"}`},
		{name: "messages json", path: "/v1/messages",
			body: `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`},
		{name: "messages json truncated by max_tokens", path: "/v1/messages",
			body: `{"model":"claude-test","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`},
		{name: "messages stream", path: "/v1/messages", stream: true,
			body: `{"model":"claude-test","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes?"},{"role":"user","content":"go on"}]}`},
		{name: "messages json with prompt cache", path: "/v1/messages", canned: true,
			body: `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"cached"}]}`},
		{name: "messages stream with prompt cache", path: "/v1/messages", canned: true, stream: true,
			body: `{"model":"claude-test","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"cached"}]}`},
		{name: "embeddings", path: "/v1/embeddings",
			body: `{"model":"text-embedding-test","input":["first text","second, longer text to embed"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := probeHeaders(tc.path)
			if tc.canned {
				headers["X-Test-Canned"] = "1"
			}
			before := readTokens(scrape(t, p.AdminURL), probeCaller)
			status, got, err := postRaw(t, client, p.URL+tc.path, tc.body, headers)
			if err != nil || status != http.StatusOK {
				t.Fatalf("status %d, err %v: %s", status, err, got)
			}
			want, ok := billedUsage(tc.path, tc.stream, got)
			if !ok || want.in == 0 {
				t.Fatalf("the client received no usage: %s", got)
			}
			d := tokensAfter(t, p.AdminURL, probeCaller, before, 1)
			if d.reported != want {
				t.Errorf("meterproxy_tokens_total{estimated=\"false\"} rose by %v, the client was billed %v", d.reported, want)
			}
			if d.estimated != (tokenCount{}) {
				t.Errorf("meterproxy_tokens_total{estimated=\"true\"} rose by %v, want 0", d.estimated)
			}
			t.Logf("billed %v, counted %v reported, %v estimated", want, d.reported, d.estimated)
		})
	}
}

// TestCutStreamIsEstimated: a stream the upstream aborts after two content
// chunks reaches the client broken, and its tokens are counted as an
// estimate (the input from the request size or from what the stream
// reported on the way), never as reported usage.
func TestCutStreamIsEstimated(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow})
	up := startUpstream(t, fake)
	p := startProxy(t, probeConfig(up.URL), probeEnv, callerKey)
	client := newClient(t, 2)
	cutShort := func() float64 {
		return sum(scrape(t, p.AdminURL), "meterproxy_responses_cut_short_total", map[string]string{"side": "upstream"})
	}

	for _, tc := range []struct{ name, path, body string }{
		{"chat stream with include_usage", "/v1/chat/completions",
			`{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"this stream breaks"}]}`},
		{"responses stream", "/v1/responses", `{"model":"gpt-test","stream":true,"input":"this stream breaks"}`},
		{"messages stream", "/v1/messages",
			`{"model":"claude-test","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"this stream breaks"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := probeHeaders(tc.path)
			headers[fakeprovider.HeaderCutAfter] = "2"
			before := readTokens(scrape(t, p.AdminURL), probeCaller)
			cutBefore, abortedBefore := cutShort(), fake.Stats().StreamsAborted

			status, got, err := postRaw(t, client, p.URL+tc.path, tc.body, headers)
			if status != http.StatusOK {
				t.Fatalf("status %d, want 200 then a broken body (err %v)", status, err)
			}
			if err == nil {
				t.Errorf("the client read a clean end of a stream the upstream aborted: %q", got)
			}
			if _, ok := billedUsage(tc.path, true, got); ok && tc.path != "/v1/messages" {
				t.Errorf("the client received usage from a stream cut before it: %s", got)
			}
			if n := fake.Stats().StreamsAborted - abortedBefore; n != 1 {
				t.Fatalf("the fake aborted %d streams, want 1", n)
			}

			d := tokensAfter(t, p.AdminURL, probeCaller, before, 1)
			estimate := int64((len(tc.body) + 3) / 4) // the proxy's input estimate, and the fake's own count
			if d.reported != (tokenCount{}) {
				t.Errorf("estimated=\"false\" rose by %v for a cut stream, want 0", d.reported)
			}
			if d.estimated.in != estimate {
				t.Errorf("estimated=\"true\" input rose by %d, want %d (request bytes / 4)", d.estimated.in, estimate)
			}
			if d.estimated.out <= 0 {
				t.Errorf("estimated=\"true\" output rose by %d, want > 0 for two chunks of text", d.estimated.out)
			}
			if n := cutShort() - cutBefore; n != 1 {
				t.Errorf("meterproxy_responses_cut_short_total{side=\"upstream\"} rose by %v, want 1", n)
			}
			t.Logf("client read %d bytes, then %v; counted %v estimated", len(got), err, d.estimated)
		})
	}
}

// TestInjectStreamUsage: with upstream.inject_stream_usage, a streamed chat
// request that did not ask for usage is sent upstream asking for it; the
// client's stream is the upstream's minus exactly the usage chunk, and the
// proxy counts the reported tokens. A caller that asked for usage gets it.
func TestInjectStreamUsage(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow, RecordBodies: true})
	up := startUpstream(t, fake)
	cfg := probeConfig(up.URL)
	cfg.set("upstream.inject_stream_usage", true)
	p := startProxy(t, cfg, probeEnv, callerKey)
	client := newClient(t, 2)
	const path = "/v1/chat/completions"

	for _, tc := range []struct {
		name, body string
		stream     bool
		injected   bool // the upstream gets a different body, and the client loses the usage chunk
	}{
		{name: "stream without stream_options", stream: true, injected: true,
			body: `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"count my tokens"}]}`},
		{name: "stream with include_usage false", stream: true, injected: true,
			body: `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"count my tokens"}]}`},
		{name: "stream that asked for usage", stream: true,
			body: `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"count my tokens"}]}`},
		{name: "not streamed",
			body: `{"model":"gpt-test","messages":[{"role":"user","content":"count my tokens"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := readTokens(scrape(t, p.AdminURL), probeCaller)
			seen := len(fake.Requests())
			status, got, err := postRaw(t, client, p.URL+path, tc.body, probeHeaders(path))
			if err != nil || status != http.StatusOK {
				t.Fatalf("status %d, err %v: %s", status, err, got)
			}
			d := tokensAfter(t, p.AdminURL, probeCaller, before, 1)
			reqs := fake.Requests()
			if len(reqs) != seen+1 {
				t.Fatalf("the upstream saw %d requests, want 1", len(reqs)-seen)
			}
			sent := reqs[seen].Body

			// What the upstream received.
			if tc.injected {
				if v := gjson.GetBytes(sent, "stream_options.include_usage"); v.Type != gjson.True {
					t.Errorf("upstream body has stream_options.include_usage %s, want true: %s", v.Raw, sent)
				}
			} else if !bytes.Equal(sent, []byte(tc.body)) {
				t.Errorf("upstream body changed:\n got %s\nwant %s", sent, tc.body)
			}

			// What the upstream answered, replayed directly (the fake is
			// deterministic), and what the client received of it.
			direct, _, upstream := post(t, client, up.URL+path, string(sent), probeHeaders(path))
			if direct != http.StatusOK {
				t.Fatalf("direct replay: %d %s", direct, upstream)
			}
			billed, ok := billedUsage(path, tc.stream, upstream)
			if !ok {
				t.Fatalf("the upstream reported no usage: %s", upstream)
			}
			want := upstream
			if tc.injected {
				want = dropUsageChunk(t, upstream)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("client received\n%s\nwant the upstream's stream%s:\n%s", got, map[bool]string{true: " minus its usage chunk"}[tc.injected], want)
			}
			if tc.stream {
				if !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
					t.Errorf("the client's stream does not end with data: [DONE]: %q", tail(string(got), 3))
				}
				usageChunks := 0
				for _, ev := range parseSSE(got) {
					if isUsageChunk(ev.data) {
						usageChunks++
					}
				}
				if wantChunks := map[bool]int{true: 0, false: 1}[tc.injected]; usageChunks != wantChunks {
					t.Errorf("the client received %d usage chunks, want %d", usageChunks, wantChunks)
				}
			}

			// What the proxy counted: the upstream's own numbers.
			if d.reported != billed || d.estimated != (tokenCount{}) {
				t.Errorf("counted %v reported and %v estimated, want %v reported (the upstream's usage)", d.reported, d.estimated, billed)
			}
			t.Logf("upstream body %d bytes (sent %d), billed %v, counted %v", len(sent), len(tc.body), billed, d.reported)
		})
	}
}

// dropUsageChunk removes the one include_usage chunk from a chat stream.
func dropUsageChunk(t *testing.T, stream []byte) []byte {
	t.Helper()
	var out []byte
	dropped := 0
	for ev := range strings.SplitAfterSeq(string(stream), "\n\n") {
		if data, ok := strings.CutPrefix(strings.TrimSuffix(ev, "\n\n"), "data: "); ok && isUsageChunk(data) {
			dropped++
			continue
		}
		out = append(out, ev...)
	}
	if dropped != 1 {
		t.Fatalf("the upstream's stream has %d usage chunks, want 1", dropped)
	}
	return out
}

// TestTokensPerMinutePartition: an account whose token allowance binds long
// before its request allowance. A bulk flood from 20 goroutines beside
// steady interactive traffic for 6 seconds; in every second the tokens that
// reach the upstream (prompt bytes / 4 plus the completion tokens the fake
// bills) stay within the second's token allowance plus one request, bulk
// stays out of the interactive reserve, interactive is always admitted, and
// the upstream never answers 429.
func TestTokensPerMinutePartition(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s load run; skipped with -short")
	}
	const (
		rpm         = 60_000 // 1000 requests a second: never the bound
		maxTokens   = 5      // below the fake's 9-word reply: it bills exactly this
		perSecond   = 10.5   // requests a second the token allowance fits: not a whole number, so windows overshoot
		runFor      = 6 * time.Second
		bulkWorkers = 20
		chatRate    = 3 // interactive a second: the 30% reserve
		late        = 1 // requests admitted at a window's very end that land in the next second
	)
	body := func(who string) string {
		return `{"model":"gpt-test","max_tokens":` + fmt.Sprint(maxTokens) + `,"messages":[{"role":"user","content":"` +
			who + ` ` + strings.Repeat("lorem ipsum ", 40) + `"}]}`
	}
	chatBody, bulkBody := body("chat"), body("bulk")
	if len(chatBody) != len(bulkBody) {
		t.Fatal("the two classes' bodies must cost the same")
	}
	// The proxy charges bytes/4 + max_tokens; the fake bills the same, so
	// no correction moves the windows and the bound is exact.
	cost := int64((len(chatBody)+3)/4) + maxTokens
	tpm := int64(perSecond * float64(cost) * 60)
	tokensOf := func(r fakeprovider.Request) int64 {
		return int64((len(r.Body)+3)/4) + min(gjson.GetBytes(r.Body, "max_tokens").Int(), 9)
	}

	fake := fakeprovider.New(fakeprovider.Config{RPM: rpm, Latency: 20 * time.Millisecond, RecordBodies: true})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("account.requests_per_minute", rpm)
	cfg.set("account.tokens_per_minute", tpm)
	cfg.set("classes.interactive.max_wait", "2s")
	cfg.set("classes.bulk.max_wait", "3s")
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 64)

	out := newOutcomes()
	var mu sync.Mutex
	var misbilled []string
	send := func(ctx context.Context, class, key, body string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(res.Body)
			err = errors.Join(err, res.Body.Close())
		}
		switch {
		case err != nil && ctx.Err() != nil:
			out.record(class, 0, nil, err)
			return
		case err != nil:
			t.Errorf("%s: %v", class, err)
			return
		}
		out.record(class, res.StatusCode, b, nil)
		if res.StatusCode == http.StatusOK {
			if u := gjson.GetBytes(b, "usage"); u.Get("prompt_tokens").Int()+u.Get("completion_tokens").Int() != cost {
				mu.Lock()
				misbilled = append(misbilled, u.Raw)
				mu.Unlock()
			}
		}
	}

	bulkCtx, stopBulk := context.WithCancel(t.Context())
	defer stopBulk()
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(runFor)
	for range bulkWorkers {
		wg.Go(func() {
			for time.Now().Before(stop) && bulkCtx.Err() == nil {
				send(bulkCtx, "bulk", importKey, bulkBody)
			}
		})
	}
	sentChat := 0
	tick := time.NewTicker(time.Second / chatRate)
	for time.Now().Before(stop) {
		<-tick.C
		sentChat++
		wg.Go(func() { send(t.Context(), "interactive", chatKey, chatBody) })
	}
	tick.Stop()
	stopBulk() // bulk still queued at the end is cancelled by its client
	wg.Wait()

	if len(misbilled) > 0 {
		t.Fatalf("the fake billed %d responses other than %d tokens (bytes/4 + max_tokens), e.g. %s", len(misbilled), cost, misbilled[0])
	}
	if out.ok["interactive"] != sentChat || len(out.refused["interactive"]) != 0 || out.cancelled["interactive"] != 0 {
		t.Errorf("interactive: %d of %d admitted, refused %v, cancelled %d", out.ok["interactive"], sentChat, out.refused["interactive"], out.cancelled["interactive"])
	}
	for code, n := range out.refused["bulk"] {
		t.Errorf("bulk refused %d times with %q; the 3 s max_wait should hold it", n, code)
	}
	if len(out.other) > 0 {
		t.Errorf("unexpected answers: %v", out.other)
	}
	if st := fake.Stats(); st.RateLimited != 0 {
		t.Errorf("the upstream answered 429 %d times", st.RateLimited)
	}

	// Tokens that reached the upstream, per second of arrival.
	total, bulk := map[int64]int64{}, map[int64]int64{}
	for _, r := range fake.Requests() {
		s, n := r.Arrived.Unix(), tokensOf(r)
		total[s] += n
		if r.Header.Get("Authorization") == "Bearer "+importKey {
			bulk[s] += n
		}
	}
	checkTokenSeconds(t, total, bulk, tpm, cost, late, start.Unix()+1, stop.Unix()-1)
	mfs := scrape(t, p.AdminURL)
	t.Logf("token allowance %d/min (%.1f/s), one request %d tokens; interactive %d sent, %d admitted; bulk %d forwarded, %d held first, %d cancelled at the end",
		tpm, float64(tpm)/60, cost, sentChat, out.ok["interactive"], out.ok["bulk"],
		int(sum(mfs, "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"})), out.cancelled["bulk"])
}

// checkTokenSeconds: no second's tokens at the upstream exceed the second's
// token allowance plus one request (a window lets its last request through
// while any room is left), allowing late requests admitted in a window's
// last milliseconds to land in the next second; bulk's never exceed the
// allowance less the interactive reserve, with the same slack; and in the
// full seconds from..to the flood used at least 70% of the allowance.
func checkTokenSeconds(t *testing.T, total, bulk map[int64]int64, tpm, cost, late, from, to int64) {
	t.Helper()
	secs := slices.Sorted(maps.Keys(total))
	reserve := int64(float64(tpm)*0.3 + 1e-9)
	var perSec, bulkPerSec, allowances []int64
	var used, allowed, worst int64
	for s := secs[0]; s <= secs[len(secs)-1]; s++ {
		a := store.Allowance(s, tpm)
		worst = max(worst, total[s]-a)
		allowances = append(allowances, a)
		slack := cost * (1 + late)
		if total[s] > a+slack {
			t.Errorf("second %d: %d tokens reached the upstream, allowance %d (+%d for one request over and %d late)", s, total[s], a, cost, late)
		}
		if b := a - store.Allowance(s, reserve); bulk[s] > b+slack {
			t.Errorf("second %d: bulk sent %d tokens upstream, beyond the allowance less the reserve %d (+%d)", s, bulk[s], b, slack)
		}
		if s >= from && s <= to {
			used += total[s]
			allowed += a
		}
		perSec, bulkPerSec = append(perSec, total[s]), append(bulkPerSec, bulk[s])
	}
	if allowed > 0 && used*10 < allowed*7 {
		t.Errorf("seconds %d..%d: %d tokens upstream of %d allowed; the flood should use at least 70%%", from, to, used, allowed)
	}
	t.Logf("tokens upstream per second: %v (bulk %v); allowance %v; most over a second's allowance %d (one request %d); %d%% used in the full seconds",
		perSec, bulkPerSec, allowances, worst, cost, used*100/max(allowed, 1))
}
