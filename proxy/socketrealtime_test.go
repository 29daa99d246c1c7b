package proxy

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// rtPrice prices gpt-realtime as OpenAI does: $4 in, $0.40 cached, $16
// out per million text tokens; $32 in and $64 out per million audio
// tokens.
var rtPrice = price.Price{Match: []string{"gpt-realtime*"}, Input: 4, CachedInput: 0.4, Output: 16, AudioInput: 32, AudioOutput: 64}

// rtProxy is a test proxy in front of fp that spends its own account,
// with callers alice (bulk, key sk-alice) and bob (interactive, key
// sk-bob), gpt-realtime priced, and mutate's changes.
func rtProxy(t *testing.T, fp *fakeprovider.Provider, mutate func(*Config, *quota.Config, *[]classify.Caller)) *testProxy {
	t.Helper()
	return rtProxyLogged(t, fp, nil, mutate)
}

// rtProxyLogged is rtProxy writing its access log to access (nil: none).
func rtProxyLogged(t *testing.T, fp *fakeprovider.Provider, access *AccessLog, mutate func(*Config, *quota.Config, *[]classify.Caller)) *testProxy {
	t.Helper()
	t.Cleanup(func() { fp.CloseSockets() })
	return newTestProxy(t, proxyOpts{upstream: fp, environ: map[string]string{"ALICE_KEY": "sk-alice", "BOB_KEY": "sk-bob"}, access: access,
		mutate: func(c *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			c.Upstream.APIKey = "sk-test" // the proxy's own key: the sessions spend this account
			q.Prices = []price.Price{rtPrice}
			*callers = []classify.Caller{{Name: "alice", KeyEnv: "ALICE_KEY", Class: classify.Bulk},
				{Name: "bob", KeyEnv: "BOB_KEY", Class: classify.Interactive, MayClaimInteractive: true}}
			if mutate != nil {
				mutate(c, q, callers)
			}
		}})
}

// dialRT opens a Realtime session on p as key, at path (with its query).
func dialRT(t *testing.T, p *testProxy, key, path string) (*websocket.Conn, error) {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), strings.Replace(p.URL, "http", "ws", 1)+path,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err == nil {
		t.Cleanup(func() { _ = c.CloseNow() })
	}
	return c, err
}

// refusedRT is the status and error body a Realtime handshake on p as
// key at path was refused with; the test fails when it was accepted.
func refusedRT(t *testing.T, p *testProxy, key, path string) (int, openAIError) {
	t.Helper()
	var body openAIError
	c, resp, err := websocket.Dial(t.Context(), strings.Replace(p.URL, "http", "ws", 1)+path,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err == nil {
		_ = c.CloseNow()
		t.Fatalf("%s: the handshake was accepted", path)
	}
	if resp == nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Errorf("%s: the refusal's body: %v", path, err)
	}
	return resp.StatusCode, body
}

// openRT opens a session and reads its session.created.
func openRT(t *testing.T, p *testProxy, key, path string) *websocket.Conn {
	t.Helper()
	c, err := dialRT(t, p, key, path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	if ev := rtRead(t, c); ev["type"] != "session.created" {
		t.Fatalf("first event %v", ev)
	}
	return c
}

func rtSend(t *testing.T, c *websocket.Conn, ev string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(ev)); err != nil {
		t.Fatal(err)
	}
}

func rtRead(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	_, data, err := c.Read(t.Context())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// rtUntil reads events up to one of types, and returns them.
func rtUntil(t *testing.T, c *websocket.Conn, types ...string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for {
		ev := rtRead(t, c)
		evs = append(evs, ev)
		for _, typ := range types {
			if ev["type"] == typ {
				return evs
			}
		}
	}
}

// rtTextOnly turns server voice detection off and answers in text.
const rtTextOnly = `{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`

// rtItem is a user message of conversation.item.create.
const rtItem = `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}}`

// rtUsage sums the fake's logged Realtime usage: input, cached, output.
func rtUsage(fp *fakeprovider.Provider) (in, cached, out int) {
	for _, r := range fp.Requests() {
		if r.Socket == fakeprovider.SocketRealtime && r.Usage != nil {
			in, cached, out = in+r.Usage.InputTokens, cached+r.Usage.CachedTokens, out+r.Usage.OutputTokens
		}
	}
	return in, cached, out
}

// rtGone waits until p has no session open and nothing in flight.
func rtGone(t *testing.T, p *testProxy) {
	t.Helper()
	socketsGone(t, p)
	waitFor(t, "sessions uncounted", func() bool { return sumSeries(t, p, "meterproxy_realtime_sessions", nil) == 0 })
}

// TestRealtimeResponsesMeteredExactly: two client responses of a text
// session, each admitted, settled from its response.done (the second's
// input the whole conversation, the first's cached) and priced; the
// session counted while open, and nothing left when it closes.
func TestRealtimeResponsesMeteredExactly(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{RPM: 6000, TPM: 1_000_000})
	p := rtProxy(t, fp, nil)
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	if n := sumSeries(t, p, "meterproxy_realtime_sessions", map[string]string{"class": "bulk", "caller": "alice"}); n != 1 {
		t.Errorf("sessions = %v, want 1 while open", n)
	}
	rtSend(t, c, rtTextOnly)
	rtUntil(t, c, "session.updated")
	rtSend(t, c, rtItem)
	rtUntil(t, c, "conversation.item.created")
	for range 2 {
		rtSend(t, c, `{"type":"response.create","response":{"max_output_tokens":200}}`)
		if evs := rtUntil(t, c, "response.done", "error"); evs[len(evs)-1]["type"] != "response.done" {
			t.Fatalf("response ended with %v", evs[len(evs)-1])
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	rtGone(t, p)
	in, cached, out := rtUsage(fp)
	if in == 0 || cached == 0 || out == 0 {
		t.Fatalf("the fake logged in %d cached %d out %d", in, cached, out)
	}
	got := func(name string, l map[string]string) float64 { return sumSeries(t, p, name, l) }
	if n := got("meterproxy_tokens_total", map[string]string{"kind": "input", "estimated": "false", "caller": "alice"}); n != float64(in) {
		t.Errorf("input tokens = %v, want the fake's %d", n, in)
	}
	if n := got("meterproxy_tokens_total", map[string]string{"kind": "output", "estimated": "false", "caller": "alice"}); n != float64(out) {
		t.Errorf("output tokens = %v, want the fake's %d", n, out)
	}
	want := (float64(in-cached)*4 + float64(cached)*0.4 + float64(out)*16) / 1e6
	if n := got("meterproxy_spend_usd_total", map[string]string{"caller": "alice", "estimated": "false"}); !near(n, want) {
		t.Errorf("spend = %v, want %v", n, want)
	}
	for name, want := range map[string]float64{"meterproxy_socket_turns_total": 2, "meterproxy_realtime_unheld_responses_total": 0} {
		if n := got(name, nil); n != want {
			t.Errorf("%s = %v, want %v", name, n, want)
		}
	}
	if n := got("meterproxy_requests_total", map[string]string{"caller": "alice", "outcome": "forwarded", "code": "200"}); n != 2 {
		t.Errorf("forwarded = %v, want 2: one a response, the handshake none", n)
	}
}

// near reports whether a and b agree to a nanodollar.
func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestRealtimeServerVADUnheld: with server voice detection the provider
// creates a response on a commit, with no response.create to hold: it
// is counted as unheld and settled all the same, spoken, its audio
// tokens at the audio prices.
func TestRealtimeServerVADUnheld(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, nil)
	c := openRT(t, p, "sk-bob", "/openai/realtime?api-version=2025-08-28&deployment=gpt-realtime")
	audio := base64.StdEncoding.EncodeToString(make([]byte, 9600)) // 200 ms: 2 tokens
	rtSend(t, c, `{"type":"input_audio_buffer.append","audio":"`+audio+`"}`)
	rtSend(t, c, `{"type":"input_audio_buffer.commit"}`)
	rtUntil(t, c, "response.done")
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	rtGone(t, p)
	var u *fakeprovider.Usage
	for _, r := range fp.Requests() {
		if r.ServerCreated {
			u = r.Usage
		}
	}
	if u == nil || u.InputAudioTokens != 2 || u.OutputAudioTokens == 0 {
		t.Fatalf("the fake's server-created response: %+v", u)
	}
	if n := sumSeries(t, p, "meterproxy_realtime_unheld_responses_total", map[string]string{"class": "interactive"}); n != 1 {
		t.Errorf("unheld = %v, want 1", n)
	}
	if n := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"caller": "bob", "estimated": "false"}); n != float64(u.InputTokens+u.OutputTokens) {
		t.Errorf("tokens = %v, want the fake's %+v", n, u)
	}
	want := float64((u.InputTokens-u.InputAudioTokens)*4+u.InputAudioTokens*32+(u.OutputTokens-u.OutputAudioTokens)*16+u.OutputAudioTokens*64) / 1e6
	if n := sumSeries(t, p, "meterproxy_spend_usd_total", map[string]string{"caller": "bob"}); !near(n, want) {
		t.Errorf("spend = %v, want %v", n, want)
	}
}

// TestRealtimeRateLimitsHoldBulk: rate_limits.updated is the provider's
// word as its x-ratelimit-* headers are: tokens below the interactive
// reserve hold bulk, as /admin/state shows.
func TestRealtimeRateLimitsHoldBulk(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{RPM: 6000, TPM: 1000})
	p := rtProxy(t, fp, func(_ *Config, q *quota.Config, _ *[]classify.Caller) {
		q.Classes.Interactive.Reserve = 0.5
	})
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	rtSend(t, c, rtTextOnly)
	rtSend(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"`+
		strings.Repeat("many words ", 250)+`"}]}}`)
	rtSend(t, c, `{"type":"response.create"}`)
	rtUntil(t, c, "rate_limits.updated")
	waitFor(t, "bulk held on the provider's word", func() bool { return p.admitter.State().UpstreamHoldSeconds > 0 })
	if n := sumSeries(t, p, "meterproxy_upstream_limit", map[string]string{"kind": "tokens"}); n != 1000 {
		t.Errorf("upstream token limit = %v, want the event's 1000", n)
	}
}

// TestRealtimeClientVanishingMidResponse: a client gone while a response
// streams leaves nothing in flight: its turn is settled (cut, at its
// worst case), its slot, its session and its socket freed.
func TestRealtimeClientVanishingMidResponse(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, nil)
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	rtSend(t, c, rtTextOnly)
	rtSend(t, c, `{"type":"response.create","response":{"metadata":{"`+strings.ToLower(fakeprovider.HeaderStallAfter)+`":"1"}}}`)
	rtUntil(t, c, "response.output_text.delta")
	if n := sumSeries(t, p, "meterproxy_caller_in_flight", map[string]string{"caller": "alice"}); n != 1 {
		t.Fatalf("in flight = %v during the response, want 1", n)
	}
	_ = c.CloseNow()
	rtGone(t, p)
	if n := sumSeries(t, p, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}); n != 1 {
		t.Errorf("cut by the client = %v, want 1", n)
	}
	if n := sumSeries(t, p, "meterproxy_requests_total", map[string]string{"caller": "alice"}); n != 1 {
		t.Errorf("requests = %v, want the response counted once", n)
	}
}

// TestRealtimeClientEvents: a response.create without an event_id gets
// one of meterproxy's, so an error answering it names it; an event the
// proxy could read otherwise than the provider is refused with an error
// event in the Realtime shape, and the session goes on.
func TestRealtimeClientEvents(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, nil)
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	for _, ev := range []string{`{"type":"response.create","type":"x"}`, `["response.create"]`, `{"type":"response.create","Event_ID":"e1"}`,
		`{"type":"response.create","response":{"max_output_tokens":"lots"}}`} {
		rtSend(t, c, ev)
		got := rtRead(t, c)
		e, _ := got["error"].(map[string]any)
		if got["type"] != "error" || e["code"] != reasonBadRequest || e["type"] != "invalid_request_error" || !strings.HasPrefix(got["event_id"].(string), "event_") {
			t.Errorf("%s answered %v, want a Realtime error event", ev, got)
		}
	}
	// A session.update may name the session's model, and no other: the
	// session is priced for its handshake's.
	rtSend(t, c, `{"type":"session.update","event_id":"u1","session":{"type":"realtime","model":"gpt-realtime-pro"}}`)
	if ev := rtRead(t, c); ev["type"] != "error" || ev["error"].(map[string]any)["event_id"] != "u1" {
		t.Errorf("a session.update naming another model answered %v", ev)
	}
	rtSend(t, c, `{"type":"session.update","session":{"type":"realtime","model":"gpt-realtime"}}`)
	if ev := rtRead(t, c); ev["type"] != "session.updated" {
		t.Errorf("a session.update naming the session's model answered %v", ev)
	}
	// A second response while one is active: the provider refuses it,
	// naming the event_id meterproxy gave it; the turn ends refused.
	rtSend(t, c, rtTextOnly)
	rtSend(t, c, `{"type":"response.create","response":{"metadata":{"`+strings.ToLower(fakeprovider.HeaderStallAfter)+`":"1"}}}`)
	rtUntil(t, c, "response.created")
	rtSend(t, c, `{"type":"response.create"}`)
	evs := rtUntil(t, c, "error")
	e, _ := evs[len(evs)-1]["error"].(map[string]any)
	if id, _ := e["event_id"].(string); !strings.HasPrefix(id, "event_meterproxy_") || e["code"] != "conversation_already_has_active_response" {
		t.Errorf("the provider's refusal %v, want it to name meterproxy's event_id", evs[len(evs)-1])
	}
	waitFor(t, "the refused turn ended", func() bool {
		return sumSeries(t, p, "meterproxy_requests_total", map[string]string{"caller": "alice", "outcome": "forwarded", "code": "400"}) == 1
	})
	if n := sumSeries(t, p, "meterproxy_caller_in_flight", map[string]string{"caller": "alice"}); n != 1 {
		t.Errorf("in flight = %v, want the stalled response's 1 alone", n)
	}
}

// TestSessionModel: the model a handshake names, by its query.
func TestSessionModel(t *testing.T) {
	oa, az := route{family: familyOpenAI}, route{family: familyAzure}
	tests := []struct {
		rt    route
		query string
		want  quota.Model
		bad   bool
	}{
		{oa, "model=gpt-realtime", quota.Model{Name: "gpt-realtime"}, false},
		{oa, "", quota.Model{}, false},
		{oa, "deployment=x", quota.Model{}, false},
		{oa, "model=a&model=b", quota.Model{}, true},
		{oa, "model=" + strings.Repeat("m", maxSessionModel+1), quota.Model{}, true},
		{oa, "model=%ff", quota.Model{}, true},
		{az, "api-version=2025-08-28&deployment=My-Realtime", quota.Model{Name: "My-Realtime", Deployment: true}, false},
		{az, "model=gpt-realtime", quota.Model{Name: "gpt-realtime", Deployment: true}, false},
		{az, "deployment=a.", quota.Model{}, true},
		{az, "deployment=a%2Fb", quota.Model{}, true},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, f := sessionModel(tt.rt, q)
		if got != tt.want || (f != nil) != tt.bad {
			t.Errorf("sessionModel(%v, %q) = %+v, %v; want %+v, refused %v", tt.rt.family, tt.query, got, f, tt.want, tt.bad)
		}
	}
}
