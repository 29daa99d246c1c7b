package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// Issue 33 item 2: the Responses API over WebSocket, metered turn by
// turn. Codex opens GET /v1/responses with Upgrade: websocket and sends
// one response.create per turn; each is admitted, charged and settled as
// a POST /v1/responses is, against the fake provider's WebSocket mode.

const (
	agentKey  = "sk-e2e-socket-agent-aaaaaaaaaaaa" // bulk, no budget
	pennyKey  = "sk-e2e-socket-penny-bbbbbbbbbbbb" // bulk, a budget of a few turns
	socketRPM = 600_000
)

// socketsProxy starts a proxy in front of fp with the agent and penny
// callers, the budget prices, and mutate's changes.
func socketsProxy(t *testing.T, fp *fakeprovider.Provider, mutate func(config)) *procs.Proxy {
	t.Helper()
	up := startUpstream(t, fp)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("prices", []map[string]any{{"match": []string{"gpt-4o*"}, "input": budgetPriceIn, "output": budgetPriceOut}})
	cfg.set("callers", []map[string]any{
		{"name": "agent", "key_env": "AGENT_KEY", "class": "bulk"},
		{"name": "penny", "key_env": "PENNY_KEY", "class": "bulk", "budget": map[string]any{"usd": 0.1, "per": "day"}},
	})
	cfg.set("account.requests_per_minute", socketRPM)
	cfg.set("upstream.api_key", "sk-provider-socket-test")
	cfg.set("classify.unknown_callers", "reject")
	if mutate != nil {
		mutate(cfg)
	}
	return startProxy(t, cfg, []string{"AGENT_KEY=" + agentKey, "PENNY_KEY=" + pennyKey}, agentKey, pennyKey)
}

// openSocket opens a Responses WebSocket on p as key, as Codex does.
func openSocket(t *testing.T, p *procs.Proxy, key string) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(p.URL, "http")+"/v1/responses", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + key}, "Openai-Beta": {"responses_websockets=2026-02-06"}}})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// socketEvent is an event read off a socket.
type socketEvent map[string]any

func (e socketEvent) typ() string { s, _ := e["type"].(string); return s }

// errorOf is an error event's status, code and message.
func (e socketEvent) errorOf() (status int, code, message string) {
	d, _ := e["error"].(map[string]any)
	code, _ = d["code"].(string)
	message, _ = d["message"].(string)
	f, _ := e["status"].(float64)
	return int(f), code, message
}

// usageOf is a terminal event's usage as the meter reads it.
func (e socketEvent) usageOf(t *testing.T) usage.Usage {
	t.Helper()
	b, _ := json.Marshal(e)
	m := usage.NewMeter(usage.Responses, "text/event-stream", 0)
	m.WriteEvent(b)
	return m.Finish(true)
}

// sendTurn sends a response.create and reads its events up to its
// terminal one or an error event.
func sendTurn(t *testing.T, c *websocket.Conn, create string) []socketEvent {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(create)); err != nil {
		t.Fatal(err)
	}
	return readTurn(t, c)
}

// readTurn reads events up to a terminal or error event.
func readTurn(t *testing.T, c *websocket.Conn) []socketEvent {
	t.Helper()
	var events []socketEvent
	for {
		_, data, err := c.Read(t.Context())
		if err != nil {
			t.Fatalf("read: %v after %d events", err, len(events))
		}
		var ev socketEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		switch ev.typ() {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return events
		}
	}
}

// createTurn is a response.create of gpt-4o with n in its input.
func createTurn(n int, extra string) string {
	return fmt.Sprintf(`{"type":"response.create","model":"gpt-4o","max_output_tokens":40,"input":"count the sheep, turn %d"%s}`, n, extra)
}

// socketsQuiet waits until p has no socket open and nothing in flight,
// and returns a scrape taken after that.
func socketsQuiet(t *testing.T, p *procs.Proxy) procs.Metrics {
	t.Helper()
	waitFor(t, "sockets closed", func() bool {
		m := scrape(t, p.AdminURL)
		return sum(m, "meterproxy_sockets_open", nil) == 0 && sum(m, "meterproxy_caller_in_flight", nil) == 0
	})
	// A scrape is no snapshot: the registry gathers its families one by
	// one while the proxy goes on, so the scrape that saw the last socket
	// close may have read a turn's counters before it counted them. A
	// socket closes after its turns are settled and counted, so a scrape
	// begun after one that saw it closed reads them all.
	return scrape(t, p.AdminURL)
}

// TestSocketTurnsMeteredExactly: two turns on one socket, each settled
// from its response.completed's usage (estimated="false"), priced, the
// provider key in place of the caller's. Before, the handshake was
// refused 400 upgrade_not_supported.
func TestSocketTurnsMeteredExactly(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, nil)
	c := openSocket(t, p, agentKey)
	var in, out int64
	var cost float64
	for n := range 2 {
		events := sendTurn(t, c, createTurn(n, ""))
		last := events[len(events)-1]
		if last.typ() != "response.completed" {
			t.Fatalf("turn %d ended with %v", n, last)
		}
		u := last.usageOf(t)
		in, out, cost = in+u.Input, out+u.Output, cost+priced(u)
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatal(err)
	}
	m := socketsQuiet(t, p)
	agent := map[string]string{"caller": "agent"}
	check := func(what string, got, want float64) {
		t.Helper()
		if diff := got - want; diff > want*1e-9 || diff < -want*1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("input tokens", sum(m, "meterproxy_tokens_total", map[string]string{"caller": "agent", "kind": "input", "estimated": "false"}), float64(in))
	check("output tokens", sum(m, "meterproxy_tokens_total", map[string]string{"caller": "agent", "kind": "output", "estimated": "false"}), float64(out))
	check("estimated tokens", sum(m, "meterproxy_tokens_total", map[string]string{"estimated": "true"}), 0)
	check("spend", sum(m, "meterproxy_spend_usd_total", map[string]string{"caller": "agent", "estimated": "false"}), cost)
	check("forwarded turns", sum(m, "meterproxy_requests_total", map[string]string{"caller": "agent", "outcome": "forwarded", "code": "200"}), 2)
	check("all requests", sum(m, "meterproxy_requests_total", agent), 2)
	check("admitted", sum(m, "meterproxy_admissions_total", map[string]string{"outcome": "admitted"}), 2)
	check("socket turns", sum(m, "meterproxy_socket_turns_total", map[string]string{"api": "responses", "outcome": "forwarded"}), 2)
	var turns int
	for _, r := range fp.Requests() {
		if r.Socket != fakeprovider.SocketResponses {
			continue
		}
		turns++
		if got := r.Header.Get("Authorization"); got != "Bearer sk-provider-socket-test" {
			t.Errorf("the provider saw Authorization %q, want the provider key", got)
		}
		if r.Header.Get("Openai-Beta") == "" {
			t.Errorf("OpenAI-Beta was not forwarded")
		}
	}
	if turns != 2 {
		t.Errorf("the provider served %d turns, want 2", turns)
	}
}

// TestSocketRefusalKeepsTheSession: a turn refused for want of a slot
// within max_wait is answered with a rate-limit error event on its lane;
// the socket stays open and the next turn is served. A budget spent
// mid-session answers the next response.create with an insufficient_quota
// error event, its message the HTTP refusal's, and the session survives.
func TestSocketRefusalKeepsTheSession(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, func(cfg config) {
		cfg.set("account.max_in_flight", 1)
		cfg.set("classes.bulk.max_wait", "200ms")
	})
	t.Run("queue", func(t *testing.T) {
		c := openSocket(t, p, agentKey)
		// Lane a holds the only slot for a second; lane b waits 200 ms and
		// is refused; then lane b's next turn is served.
		slow := createTurn(0, `,"stream_id":"a","metadata":{"x-fake-latency":"1s"}`)
		if err := c.Write(t.Context(), websocket.MessageText, []byte(slow)); err != nil {
			t.Fatal(err)
		}
		events := sendTurn(t, c, createTurn(1, `,"stream_id":"b"`))
		status, code, msg := events[len(events)-1].errorOf()
		if status != http.StatusTooManyRequests || code != "max_wait_exceeded" || events[len(events)-1]["stream_id"] != "b" {
			t.Fatalf("refusal = %v, want a 429 max_wait_exceeded error event on lane b", events[len(events)-1])
		}
		if !strings.Contains(msg, "within the class's max_wait") {
			t.Errorf("refusal message %q is not the HTTP refusal's", msg)
		}
		if last := readTurn(t, c); last[len(last)-1].typ() != "response.completed" || last[0]["stream_id"] != "a" {
			t.Fatalf("lane a ended with %v", last[len(last)-1])
		}
		if last := sendTurn(t, c, createTurn(2, `,"stream_id":"b"`)); last[len(last)-1].typ() != "response.completed" {
			t.Fatalf("the turn after the refusal ended with %v", last[len(last)-1])
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
	})
	t.Run("budget", func(t *testing.T) {
		c := openSocket(t, p, pennyKey)
		served := 0
		var refusal socketEvent
		for n := 0; n < 50 && refusal == nil; n++ {
			events := sendTurn(t, c, createTurn(n, ""))
			switch last := events[len(events)-1]; last.typ() {
			case "response.completed":
				served++
			case "error":
				refusal = last
			}
		}
		status, code, msg := refusal.errorOf()
		if served == 0 || status != http.StatusTooManyRequests || code != "budget_exceeded" || refusal["error"].(map[string]any)["type"] != "insufficient_quota" ||
			!strings.HasPrefix(msg, "meterproxy: budget caller:penny is spent") {
			t.Fatalf("after %d turns: %v, want a budget_exceeded error event", served, refusal)
		}
		// The session survives: the next turn is refused the same way, on
		// the same socket.
		if last := sendTurn(t, c, createTurn(99, "")); last[len(last)-1].typ() != "error" {
			t.Fatalf("the socket after the budget's refusal answered %v", last)
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
		m := socketsQuiet(t, p)
		if n := sum(m, "meterproxy_refusals_total", map[string]string{"reason": "budget_exceeded"}); n != 2 {
			t.Errorf("budget refusals = %v, want 2", n)
		}
	})
	m := socketsQuiet(t, p)
	// The accounting identity: every turn counted once.
	turns := sum(m, "meterproxy_socket_turns_total", nil)
	if req := sum(m, "meterproxy_requests_total", nil); req != turns {
		t.Errorf("requests %v != socket turns %v", req, turns)
	}
	adm := sum(m, "meterproxy_admissions_total", nil)
	if refusedEarly := sum(m, "meterproxy_refusals_total", map[string]string{"pool": "none"}); adm+refusedEarly != turns {
		t.Errorf("admissions %v + refused before a pool %v != turns %v", adm, refusedEarly, turns)
	}
}

// TestSocketClientVanishingFreesItsSlot: a client gone mid-turn (the
// provider stalled after response.created) frees the turn's slot at
// once, the turn settled once at its worst case.
func TestSocketClientVanishingFreesItsSlot(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, nil)
	c := openSocket(t, p, agentKey)
	if err := c.Write(t.Context(), websocket.MessageText, []byte(createTurn(0, `,"metadata":{"x-fake-stall-after":"1"}`))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := sum(scrape(t, p.AdminURL), "meterproxy_caller_in_flight", map[string]string{"caller": "agent"}); n != 1 {
		t.Fatalf("in flight = %v during the turn, want 1", n)
	}
	_ = c.CloseNow()
	m := socketsQuiet(t, p)
	if n := sum(m, "meterproxy_requests_total", map[string]string{"caller": "agent"}); n != 1 {
		t.Errorf("requests = %v, want the turn once", n)
	}
	if n := sum(m, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}); n != 1 {
		t.Errorf("cut short by the client = %v, want 1", n)
	}
	if n := sum(m, "meterproxy_spend_usd_total", map[string]string{"caller": "agent", "estimated": "true"}); n <= 0 {
		t.Errorf("the cut turn's spend = %v, want its worst case", n)
	}
}

// TestSocketCloses: the provider's connection-age limit reaches the
// client as the provider sent it (its error event, then its close code
// and reason); an oversize client message closes 1009; an unknown caller
// is refused 401 at the handshake, before any upgrade; an upgrade
// anywhere else is still refused.
func TestSocketCloses(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, WSMaxAge: time.Second})
	p := socketsProxy(t, fp, func(cfg config) { cfg.set("server.max_socket_message_bytes", 64<<10) })
	t.Run("age", func(t *testing.T) {
		c := openSocket(t, p, agentKey)
		var events []socketEvent
		var err error
		for err == nil {
			var data []byte
			if _, data, err = c.Read(t.Context()); err == nil {
				var ev socketEvent
				_ = json.Unmarshal(data, &ev)
				events = append(events, ev)
			}
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "connection limit reached" {
			t.Fatalf("close = %v, want the provider's 1000 connection limit reached", err)
		}
		if len(events) != 1 {
			t.Fatalf("events = %v, want the provider's error event", events)
		}
		if _, code, _ := events[0].errorOf(); code != "websocket_connection_limit_reached" {
			t.Errorf("event = %v", events[0])
		}
	})
	t.Run("oversize", func(t *testing.T) {
		c := openSocket(t, p, agentKey)
		big := createTurn(0, `,"instructions":"`+strings.Repeat("x", 128<<10)+`"`)
		_ = c.Write(t.Context(), websocket.MessageText, []byte(big))
		_, _, err := c.Read(t.Context())
		if code := websocket.CloseStatus(err); code != websocket.StatusMessageTooBig {
			t.Fatalf("close = %v, want 1009", err)
		}
	})
	t.Run("handshakes", func(t *testing.T) {
		ws := "ws" + strings.TrimPrefix(p.URL, "http")
		if status := wsHandshake(t, ws+"/v1/responses", "sk-nobody"); status != http.StatusUnauthorized {
			t.Errorf("unknown caller: %d, want 401", status)
		}
		if status := wsHandshake(t, ws+"/v1/chat/completions", agentKey); status != http.StatusUpgradeRequired {
			t.Errorf("upgrade on chat completions: %d, want the front door's 426", status)
		}
	})
	m := socketsQuiet(t, p)
	if n := sum(m, "meterproxy_sockets_closed_total", map[string]string{"side": "upstream"}); n != 1 {
		t.Errorf("closed by the upstream = %v, want 1 (the age limit)", n)
	}
	if n := sum(m, "meterproxy_sockets_closed_total", map[string]string{"side": "meterproxy"}); n != 1 {
		t.Errorf("closed by meterproxy = %v, want 1 (the oversize message)", n)
	}
	if n := sum(m, "meterproxy_body_memory_bytes", nil); n != 0 {
		t.Errorf("body memory = %v once every socket closed", n)
	}
}

// TestSocketUpstreamRateLimit: the provider's rate-limit error event
// answers its turn: passed to the client as it came, counted in
// meterproxy_upstream_429_total and as a forwarded 429, its headers read
// as an HTTP 429's are (the account's remaining requests), the turn's
// slot freed; the session goes on.
func TestSocketUpstreamRateLimit(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond, RPM: 2})
	p := socketsProxy(t, fp, nil)
	c := openSocket(t, p, agentKey)
	var limited socketEvent
	for n := 0; n < 3 && limited == nil; n++ {
		events := sendTurn(t, c, createTurn(n, ""))
		if last := events[len(events)-1]; last.typ() == "error" {
			limited = last
		}
	}
	if status, _, _ := limited.errorOf(); status != http.StatusTooManyRequests {
		t.Fatalf("third turn = %v, want the provider's 429 error event", limited)
	}
	m := scrape(t, p.AdminURL)
	if n := sum(m, "meterproxy_upstream_429_total", nil); n != 1 {
		t.Errorf("upstream 429s = %v, want 1", n)
	}
	if n := sum(m, "meterproxy_requests_total", map[string]string{"outcome": "forwarded", "code": "429"}); n != 1 {
		t.Errorf("forwarded 429s = %v, want 1", n)
	}
	if n := sum(m, "meterproxy_upstream_remaining", map[string]string{"kind": "requests"}); n != 0 {
		t.Errorf("upstream remaining requests = %v, want the event's 0", n)
	}
	if n := sum(m, "meterproxy_caller_in_flight", nil); n != 0 {
		t.Errorf("in flight = %v after the refused turn, want 0", n)
	}
	c.CloseRead(t.Context()) // a reader, for the pong
	if err := c.Ping(t.Context()); err != nil {
		t.Errorf("the session did not survive the provider's refusal: %v", err)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	socketsQuiet(t, p)
}

// TestSocketDrainLetsTheTurnFinish: on SIGTERM a socket's turn in flight
// finishes, a response.create sent during the drain is refused with a
// shutting_down error event, and the socket then closes 1001; the
// process exits 0.
func TestSocketDrainLetsTheTurnFinish(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, nil)
	c := openSocket(t, p, agentKey)
	if err := c.Write(t.Context(), websocket.MessageText, []byte(createTurn(0, `,"metadata":{"x-fake-latency":"3s"}`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn in flight", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_caller_in_flight", map[string]string{"caller": "agent"}) == 1
	})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sockets' drain", func() bool { return strings.Contains(p.Logs(), "sockets_draining") })
	if err := c.Write(t.Context(), websocket.MessageText, []byte(createTurn(1, ""))); err != nil {
		t.Fatal(err)
	}
	refused := readTurn(t, c)
	if status, code, _ := refused[len(refused)-1].errorOf(); status != http.StatusServiceUnavailable || code != "shutting_down" {
		t.Fatalf("a turn during the drain: %v, want a shutting_down error event", refused)
	}
	if done := readTurn(t, c); done[len(done)-1].typ() != "response.completed" {
		t.Fatalf("the turn in flight ended %v, want completed", done[len(done)-1])
	}
	_, _, err := c.Read(t.Context())
	if code := websocket.CloseStatus(err); code != websocket.StatusGoingAway {
		t.Fatalf("close = %v, want 1001 once the turn finished", err)
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
}

// wsHandshake dials url with key and returns the status of the
// handshake's answer (0 when none came); a socket opened is closed.
func wsHandshake(t *testing.T, url, key string) int {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err == nil {
		_ = c.CloseNow()
	}
	if resp == nil {
		return 0
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	return resp.StatusCode
}

// TestSocketCutAtEveryPoint: the provider's connection cut (no close
// frame) at every point of a turn ends the socket with 1014 to the
// client, frees the turn's slot and counts it once: cut short by the
// upstream and settled at an estimate before its terminal event, whole
// and exact after it.
func TestSocketCutAtEveryPoint(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, nil)
	for _, at := range []fakeprovider.CutAt{fakeprovider.CutAfterCreated, fakeprovider.CutMidDeltas, fakeprovider.CutBeforeTerminal, fakeprovider.CutAfterTerminal} {
		t.Run(string(at), func(t *testing.T) {
			before := scrape(t, p.AdminURL)
			c := openSocket(t, p, agentKey)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(createTurn(0, `,"metadata":{"x-fake-cut-at":"`+string(at)+`"}`))); err != nil {
				t.Fatal(err)
			}
			var err error
			completed := false
			for err == nil {
				var data []byte
				if _, data, err = c.Read(t.Context()); err == nil {
					completed = completed || strings.Contains(string(data), `"response.completed"`)
				}
			}
			if code := websocket.CloseStatus(err); code != websocket.StatusBadGateway {
				t.Fatalf("close = %v, want 1014 for a lost upstream", err)
			}
			m := socketsQuiet(t, p)
			d := func(name string, l map[string]string) float64 { return sum(m, name, l) - sum(before, name, l) }
			if n := d("meterproxy_requests_total", map[string]string{"outcome": "forwarded", "code": "200"}); n != 1 {
				t.Errorf("forwarded = %v, want the turn once", n)
			}
			whole := at == fakeprovider.CutAfterTerminal
			if whole != completed {
				t.Fatalf("response.completed reached the client: %v", completed)
			}
			cut, estimated := d("meterproxy_responses_cut_short_total", map[string]string{"side": "upstream"}), d("meterproxy_tokens_total", map[string]string{"estimated": "true"})
			if whole && (cut != 0 || estimated != 0) || !whole && (cut != 1 || estimated == 0) {
				t.Errorf("cut short %v, estimated tokens %v (whole: %v)", cut, estimated, whole)
			}
		})
	}
}

// TestSocketMessageOverMemoryBudget: a client message the body memory
// budget cannot hold is read, dropped and answered with a
// body_memory_exhausted error event; the socket goes on, and the next
// turn is served.
func TestSocketMessageOverMemoryBudget(t *testing.T) {
	t.Parallel()
	fp := fakeprovider.New(fakeprovider.Config{Latency: time.Millisecond})
	p := socketsProxy(t, fp, func(cfg config) {
		cfg.set("server.max_body_bytes", 64<<10)
		cfg.set("server.max_body_memory_bytes", 256<<10) // bulk may use three quarters: 192 KiB
		cfg.set("server.max_socket_message_bytes", 250<<10)
	})
	c := openSocket(t, p, agentKey)
	events := sendTurn(t, c, createTurn(0, `,"instructions":"`+strings.Repeat("x", 200<<10)+`"`))
	if status, code, _ := events[len(events)-1].errorOf(); status != http.StatusServiceUnavailable || code != "body_memory_exhausted" {
		t.Fatalf("a message over the budget: %v, want a body_memory_exhausted error event", events)
	}
	if last := sendTurn(t, c, createTurn(1, "")); last[len(last)-1].typ() != "response.completed" {
		t.Fatalf("the next turn ended %v", last[len(last)-1])
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if m := socketsQuiet(t, p); sum(m, "meterproxy_body_memory_bytes", nil) != 0 {
		t.Errorf("body memory not given back")
	}
}
