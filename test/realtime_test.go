package test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/realtime"
)

// Issue 33 item 3: Realtime sessions through the proxy, against the fake
// provider's Realtime side. A session is one WebSocket on /v1/realtime
// (Azure: /openai/realtime); each response — a client's response.create,
// held until admitted, or one the server's voice detection created,
// unheld — settles from its response.done's usage.

const (
	voiceKey = "sk-e2e-realtime-voice-cccccccccccc" // interactive, max_sessions 1
	callKey  = "sk-e2e-realtime-calls-dddddddddddd" // bulk
	// The prices of gpt-realtime, per million tokens: OpenAI's, text and
	// audio.
	rtIn, rtCached, rtOut, rtAudioIn, rtAudioOut = 4.0, 0.4, 16.0, 32.0, 64.0
)

// realtimeProxy starts a proxy in front of fp with the voice and calls
// callers (calls with a budget of budget dollars a day, none for 0),
// gpt-realtime priced, bulk bounded to two sessions, and mutate's
// changes.
func realtimeProxy(t *testing.T, fp *fakeprovider.Provider, budget float64, mutate func(config)) *procs.Proxy {
	t.Helper()
	up := startUpstream(t, fp)
	t.Cleanup(fp.CloseSockets) // before the upstream closes: it waits for its handlers
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("prices", []map[string]any{{"match": []string{"gpt-realtime*"}, "input": rtIn, "cached_input": rtCached, "output": rtOut,
		"audio_input": rtAudioIn, "audio_output": rtAudioOut}})
	calls := map[string]any{"name": "calls", "key_env": "CALLS_KEY", "class": "bulk"}
	if budget > 0 {
		calls["budget"] = map[string]any{"usd": budget, "per": "day"}
	}
	cfg.set("callers", []map[string]any{{"name": "voice", "key_env": "VOICE_KEY", "class": "interactive", "max_sessions": 1}, calls})
	cfg.set("classes.bulk.max_sessions", 2)
	cfg.set("upstream.api_key", "sk-provider-realtime-test")
	cfg.set("classify.unknown_callers", "reject")
	if mutate != nil {
		mutate(cfg)
	}
	return startProxy(t, cfg, []string{"VOICE_KEY=" + voiceKey, "CALLS_KEY=" + callKey}, voiceKey, callKey)
}

// refusal is a refused handshake's error body.
type refusal struct {
	Error struct{ Type, Code, Message string }
}

// refusedSession is the status and error body a Realtime handshake on p
// as key at path was refused with; the test fails when it was accepted.
func refusedSession(t *testing.T, p *procs.Proxy, key, path string) (int, refusal) {
	t.Helper()
	var body refusal
	c, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(p.URL, "http")+path,
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

// openSession opens a Realtime session on p as key at path (query
// included) and reads its session.created.
func openSession(t *testing.T, p *procs.Proxy, key, path string) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(p.URL, "http")+path,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	if ev := readEvent(t, c); ev.typ() != "session.created" {
		t.Fatalf("first event %v", ev)
	}
	return c
}

func sendEvent(t *testing.T, c *websocket.Conn, ev string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(ev)); err != nil {
		t.Fatal(err)
	}
}

func readEvent(t *testing.T, c *websocket.Conn) socketEvent {
	t.Helper()
	_, data, err := c.Read(t.Context())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var ev socketEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// awaitEvent reads events up to one of types, and returns the last.
func awaitEvent(t *testing.T, c *websocket.Conn, types ...string) socketEvent {
	t.Helper()
	for {
		ev := readEvent(t, c)
		for _, typ := range types {
			if ev.typ() == typ {
				return ev
			}
		}
	}
}

// doneUsage is a response.done's usage as the meter reads it.
func doneUsage(t *testing.T, ev socketEvent) usage.Usage {
	t.Helper()
	b, _ := json.Marshal(ev)
	m := usage.NewMeter(usage.Realtime, "text/event-stream", 0)
	m.WriteEvent(b)
	u := m.Finish(true)
	if u.Estimated {
		t.Fatalf("response.done without usage: %v", ev)
	}
	return u
}

// rtPriced is what a Realtime usage costs at the test's prices.
func rtPriced(u usage.Usage) float64 {
	return (float64(u.Input-u.CacheRead-u.AudioInput)*rtIn + float64(u.AudioInput)*rtAudioIn + float64(u.CacheRead)*rtCached +
		float64(u.Output-u.AudioOutput)*rtOut + float64(u.AudioOutput)*rtAudioOut) / 1e6
}

// speak appends 100 ms of audio per n and commits it: with server voice
// detection, the provider then creates a response itself.
func speak(t *testing.T, c *websocket.Conn, n int) {
	t.Helper()
	sendEvent(t, c, `{"type":"input_audio_buffer.append","audio":"`+base64.StdEncoding.EncodeToString(make([]byte, 4800*n))+`"}`)
	sendEvent(t, c, `{"type":"input_audio_buffer.commit"}`)
}

// sessionsQuiet waits until p has no session open and nothing in flight.
func sessionsQuiet(t *testing.T, p *procs.Proxy) procs.Metrics {
	t.Helper()
	var m procs.Metrics
	waitFor(t, "sessions closed", func() bool {
		m = scrape(t, p.AdminURL)
		return sum(m, "meterproxy_sockets_open", nil) == 0 && sum(m, "meterproxy_caller_in_flight", nil) == 0 &&
			sum(m, "meterproxy_realtime_sessions", nil) == 0
	})
	return m
}

// TestRealtimeMeteredExactly: a session's responses — two in text, one
// spoken, one the server's voice detection created (unheld) — each
// settled from its response.done's usage (text, audio and cached input:
// estimated="false") and priced, on OpenAI's path and Azure's; the
// session counted while open. Before, the handshake was refused.
func TestRealtimeMeteredExactly(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := realtimeProxy(t, fp, 0, nil)
	var want usage.Usage
	var cost float64
	add := func(ev socketEvent) {
		u := doneUsage(t, ev)
		want.Input, want.Output, want.CacheRead = want.Input+u.Input, want.Output+u.Output, want.CacheRead+u.CacheRead
		cost += rtPriced(u)
	}
	c := openSession(t, p, voiceKey, "/v1/realtime?model=gpt-realtime")
	if n := sum(scrape(t, p.AdminURL), "meterproxy_realtime_sessions", map[string]string{"class": "interactive", "caller": "voice"}); n != 1 {
		t.Errorf("sessions = %v while one is open, want 1", n)
	}
	sendEvent(t, c, `{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`)
	sendEvent(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}}`)
	for range 2 {
		sendEvent(t, c, `{"type":"response.create"}`)
		add(awaitEvent(t, c, "response.done"))
	}
	sendEvent(t, c, `{"type":"response.create","response":{"output_modalities":["audio"]}}`)
	spoken := awaitEvent(t, c, "response.done")
	if u := doneUsage(t, spoken); u.AudioOutput == 0 {
		t.Fatalf("the spoken response's usage %+v: no audio tokens", u)
	}
	add(spoken)
	_ = c.Close(websocket.StatusNormalClosure, "")
	sessionsQuiet(t, p) // voice may have one session at a time
	az := openSession(t, p, voiceKey, "/openai/realtime?api-version=2025-08-28&deployment=gpt-realtime")
	speak(t, az, 3)
	add(awaitEvent(t, az, "response.done"))
	_ = az.Close(websocket.StatusNormalClosure, "")
	m := sessionsQuiet(t, p)
	voice := func(l map[string]string) map[string]string { l["caller"] = "voice"; return l }
	check := func(what string, got, want float64) {
		t.Helper()
		if diff := got - want; diff > want*1e-9 || diff < -want*1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("input tokens", sum(m, "meterproxy_tokens_total", voice(map[string]string{"kind": "input", "estimated": "false"})), float64(want.Input))
	check("output tokens", sum(m, "meterproxy_tokens_total", voice(map[string]string{"kind": "output", "estimated": "false"})), float64(want.Output))
	check("estimated tokens", sum(m, "meterproxy_tokens_total", map[string]string{"estimated": "true"}), 0)
	check("spend", sum(m, "meterproxy_spend_usd_total", voice(map[string]string{"estimated": "false"})), cost)
	check("responses", sum(m, "meterproxy_requests_total", voice(map[string]string{"outcome": "forwarded", "code": "200"})), 4)
	check("unheld", sum(m, "meterproxy_realtime_unheld_responses_total", map[string]string{"class": "interactive"}), 1)
	check("turns", sum(m, "meterproxy_socket_turns_total", map[string]string{"api": "realtime", "outcome": "forwarded"}), 4)
	if want.CacheRead == 0 {
		t.Errorf("no cached input in the responses: the test does not price it")
	}
	// The provider key goes in the header each provider reads keys from:
	// Authorization on OpenAI's path, api-key on Azure's.
	for _, r := range fp.Requests() {
		header, want := "Authorization", "Bearer sk-provider-realtime-test"
		if strings.HasPrefix(r.Path, "/openai/") {
			header, want = "Api-Key", "sk-provider-realtime-test"
		}
		if got := r.Header.Get(header); r.Socket == fakeprovider.SocketRealtime && got != want {
			t.Errorf("the provider saw %s %q on %s, want the provider key", header, redact(got), r.Path)
		}
	}
}

// TestRealtimeSessionBounds: callers[].max_sessions and classes.<class>.
// max_sessions refuse a session past them at the handshake (429
// too_many_sessions, in the provider's error shape), the gauge counting
// the sessions open; a session closed gives its place back.
func TestRealtimeSessionBounds(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := realtimeProxy(t, fp, 0, nil)
	const path = "/v1/realtime?model=gpt-realtime"
	refused := func(key, why string) {
		t.Helper()
		if status, body := refusedSession(t, p, key, path); status != http.StatusTooManyRequests || body.Error.Code != "too_many_sessions" ||
			body.Error.Type != "rate_limit_error" {
			t.Errorf("%s: %d %+v, want 429 too_many_sessions", why, status, body)
		}
	}
	v := openSession(t, p, voiceKey, path)
	refused(voiceKey, "voice's second (callers[].max_sessions: 1)")
	c1 := openSession(t, p, callKey, path)
	openSession(t, p, callKey, path)
	refused(callKey, "bulk's third (classes.bulk.max_sessions: 2)")
	m := scrape(t, p.AdminURL)
	for l, want := range map[[2]string]float64{{"interactive", "voice"}: 1, {"bulk", "calls"}: 2} {
		if n := sum(m, "meterproxy_realtime_sessions", map[string]string{"class": l[0], "caller": l[1]}); n != want {
			t.Errorf("sessions of %v = %v, want %v", l, n, want)
		}
	}
	if n := sum(m, "meterproxy_refusals_total", map[string]string{"reason": "too_many_sessions"}); n != 2 {
		t.Errorf("refusals = %v, want 2", n)
	}
	if n := fp.Stats().RealtimeSessions; n != 3 {
		t.Errorf("the provider saw %d sessions, want the 3 admitted", n)
	}
	_ = v.Close(websocket.StatusNormalClosure, "")
	_ = c1.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the places back", func() bool {
		m := scrape(t, p.AdminURL)
		return sum(m, "meterproxy_realtime_sessions", map[string]string{"caller": "voice"}) == 0 &&
			sum(m, "meterproxy_realtime_sessions", map[string]string{"caller": "calls"}) == 1
	})
	openSession(t, p, voiceKey, path)
	openSession(t, p, callKey, path)
}

// TestRealtimeBudget: a budget spent by a response the server's voice
// detection created (unheld: charged past the budget) answers the
// client's next response.create with an insufficient_quota error event
// naming it, the session kept; the next response the server creates
// closes the session — the error event, then a close 1008 — and nothing
// is left in flight; a new session is refused at the handshake (429
// budget_exceeded).
func TestRealtimeBudget(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := realtimeProxy(t, fp, 0.01, func(cfg config) {
		// A response's worst case at what the proxy sees fits the $0.01
		// budget; a spoken one (45 output tokens) costs $0.045.
		cfg.set("prices", []map[string]any{{"match": []string{"gpt-realtime*"}, "input": 50, "output": 1000, "max_input": 1000, "max_output": 9}})
	})
	const path = "/v1/realtime?model=gpt-realtime"
	c := openSession(t, p, callKey, path)
	speak(t, c, 2)
	awaitEvent(t, c, "response.done")
	waitFor(t, "the budget spent", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_budget_spent_usd", map[string]string{"budget": "caller:calls"}) >= 0.01
	})
	sendEvent(t, c, `{"type":"response.create","event_id":"c1"}`)
	ev := awaitEvent(t, c, "error")
	e, _ := ev["error"].(map[string]any)
	if _, code, msg := ev.errorOf(); code != "budget_exceeded" || e["type"] != "insufficient_quota" || e["event_id"] != "c1" ||
		!strings.HasPrefix(msg, "meterproxy: budget caller:calls is spent") {
		t.Fatalf("response.create past the budget answered %v", ev)
	}
	speak(t, c, 2) // the session goes on; the server creates a response nothing can hold
	var last socketEvent
	var err error
	for err == nil {
		var data []byte
		if _, data, err = c.Read(t.Context()); err == nil {
			var ev socketEvent
			_ = json.Unmarshal(data, &ev)
			if ev.typ() == "error" {
				last = ev
			}
		}
	}
	var ce websocket.CloseError
	if _, code, _ := last.errorOf(); code != "budget_exceeded" || !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation {
		t.Fatalf("the session ended with %v after %v, want a budget_exceeded error event then a close 1008", err, last)
	}
	m := sessionsQuiet(t, p)
	if n := sum(m, "meterproxy_realtime_unheld_responses_total", map[string]string{"class": "bulk"}); n != 2 {
		t.Errorf("unheld = %v, want 2", n)
	}
	if n := sum(m, "meterproxy_sockets_closed_total", map[string]string{"api": "realtime", "side": "meterproxy"}); n != 1 {
		t.Errorf("closed by meterproxy = %v, want 1", n)
	}
	if status, body := refusedSession(t, p, callKey, path); status != http.StatusTooManyRequests || body.Error.Code != "budget_exceeded" ||
		body.Error.Type != "insufficient_quota" {
		t.Errorf("a new session past the budget: %d %+v, want 429 budget_exceeded", status, body)
	}
	if n := fp.Stats().RealtimeSessions; n != 1 {
		t.Errorf("the provider saw %d sessions, want 1", n)
	}
}

// TestRealtimeRateLimitsHold: rate_limits.updated is the provider's
// word, as its x-ratelimit-* headers are: a session's response leaving
// the provider's token bucket below the interactive reserve holds bulk
// (meterproxy_upstream_hold_seconds), and a bulk request then waits.
func TestRealtimeRateLimitsHold(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, RPM: 6000, TPM: 1000})
	p := realtimeProxy(t, fp, 0, func(cfg config) {
		cfg.set("classes.interactive.reserve", 0.5)
		cfg.set("upstream.max_hold", "3s")
	})
	c := openSession(t, p, voiceKey, "/v1/realtime?model=gpt-realtime")
	sendEvent(t, c, `{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`)
	sendEvent(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"`+
		strings.Repeat("many words ", 250)+`"}]}}`)
	sendEvent(t, c, `{"type":"response.create"}`)
	limits := awaitEvent(t, c, "rate_limits.updated")
	m := scrape(t, p.AdminURL)
	if n := sum(m, "meterproxy_upstream_remaining", map[string]string{"kind": "tokens"}); n >= 500 {
		t.Fatalf("upstream tokens remaining %v after %v, want below the reserve", n, limits)
	}
	waitFor(t, "bulk held on the event's word", func() bool { return sum(scrape(t, p.AdminURL), "meterproxy_upstream_hold_seconds", nil) > 0 })
	status, _, _ := post(t, http.DefaultClient, p.URL+"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"Authorization": "Bearer " + callKey})
	if status != http.StatusOK {
		t.Fatalf("bulk request: %d", status)
	}
	if n := sum(scrape(t, p.AdminURL), "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"}); n != 1 {
		t.Errorf("bulk held = %v, want 1", n)
	}
}

// TestRealtimeClientVanishes: a client gone mid-response (the provider
// stalled after its first delta) leaves nothing in flight: the response
// settled once, cut, at its worst case; its slot, session and socket
// freed.
func TestRealtimeClientVanishes(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := realtimeProxy(t, fp, 0, nil)
	c := openSession(t, p, voiceKey, "/v1/realtime?model=gpt-realtime")
	sendEvent(t, c, `{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`)
	sendEvent(t, c, `{"type":"response.create","response":{"metadata":{"x-fake-stall-after":"1"}}}`)
	awaitEvent(t, c, "response.output_text.delta")
	if n := sum(scrape(t, p.AdminURL), "meterproxy_caller_in_flight", map[string]string{"caller": "voice"}); n != 1 {
		t.Fatalf("in flight = %v during the response, want 1", n)
	}
	_ = c.CloseNow()
	m := sessionsQuiet(t, p)
	if n := sum(m, "meterproxy_requests_total", map[string]string{"caller": "voice"}); n != 1 {
		t.Errorf("requests = %v, want the response once", n)
	}
	if n := sum(m, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}); n != 1 {
		t.Errorf("cut short by the client = %v, want 1", n)
	}
	if n := sum(m, "meterproxy_spend_usd_total", map[string]string{"caller": "voice", "estimated": "true"}); n <= 0 {
		t.Errorf("the cut response's spend = %v, want its worst case", n)
	}
}

// TestRealtimeOfficialSDK: the official Go SDK's Realtime connection,
// pointed at the proxy, decodes the provider's events and meterproxy's
// own: a response metered exactly, then — its caller's budget spent —
// the budget_exceeded error event answering its next response.create.
func TestRealtimeOfficialSDK(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := realtimeProxy(t, fp, 0.01, func(cfg config) {
		cfg.set("prices", []map[string]any{{"match": []string{"gpt-realtime*"}, "input": 50, "output": 1000, "max_input": 1000, "max_output": 9}})
	})
	client := openai.NewClient(option.WithBaseURL(p.URL+"/v1/"), option.WithAPIKey(callKey), option.WithMaxRetries(0))
	conn, err := client.Realtime.Connect(t.Context(), realtime.RealtimeConnectionOptions{}, option.WithQuery("model", "gpt-realtime"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	recv := func(typ string) realtime.RealtimeServerEventUnion {
		t.Helper()
		for {
			ev, err := conn.Recv(t.Context())
			if err != nil {
				t.Fatalf("recv: %v", err)
			}
			if ev.Type == typ {
				return ev
			}
		}
	}
	recv("session.created")
	for _, ev := range []string{
		`{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`,
		`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("word ", 60) + `"}]}}`,
		`{"type":"response.create"}`,
	} {
		if err := conn.SendRaw(t.Context(), json.RawMessage(ev)); err != nil {
			t.Fatal(err)
		}
	}
	u := recv("response.done").AsResponseDoneEvent().Response.Usage
	waitFor(t, "the budget spent", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_budget_spent_usd", map[string]string{"budget": "caller:calls"}) >= 0.01
	})
	if err := conn.SendRaw(t.Context(), json.RawMessage(`{"type":"response.create","event_id":"sdk-1"}`)); err != nil {
		t.Fatal(err)
	}
	e := recv("error").AsRealtimeErrorEvent()
	if e.Error.Code != "budget_exceeded" || e.Error.Type != "insufficient_quota" || e.Error.EventID != "sdk-1" || !strings.HasPrefix(e.EventID, "event_") {
		t.Errorf("the SDK decoded %s", e.RawJSON())
	}
	_ = conn.Close()
	m := sessionsQuiet(t, p)
	calls := map[string]string{"caller": "calls", "estimated": "false"}
	if n := sum(m, "meterproxy_tokens_total", calls); n != float64(u.InputTokens+u.OutputTokens) || n == 0 {
		t.Errorf("tokens = %v, want the SDK's usage %s", n, u.RawJSON())
	}
}
