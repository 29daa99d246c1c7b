package proxy

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// wsUpstream is a tiny Responses WebSocket upstream for the socket
// layer's unit tests (the end-to-end tests use the fake provider): each
// response.create is answered on its lane with response.created, one
// delta and response.completed carrying usage {input 11, output 7}; a
// create whose model is "hold" gets response.created and then nothing
// until release is closed; one whose model is "close" makes it close the
// socket with 4001.
type wsUpstream struct {
	release chan struct{}
	once    sync.Once
	// headers are the handshake headers it saw last.
	mu      sync.Mutex
	headers http.Header
}

func newWSUpstream() *wsUpstream { return &wsUpstream{release: make(chan struct{})} }

func (u *wsUpstream) free() { u.once.Do(func() { close(u.release) }) }

func (u *wsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.headers = r.Header.Clone()
	u.mu.Unlock()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionNoContextTakeover})
	if err != nil {
		return
	}
	defer func() { _ = c.CloseNow() }()
	done := make(chan struct{})
	defer close(done)
	go func() { // a held turn's end: the socket closes
		select {
		case <-u.release:
			_ = c.CloseNow()
		case <-done:
		}
	}()
	c.SetReadLimit(-1)
	ctx := context.Background()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var req struct {
			Type     string `json:"type"`
			Model    string `json:"model"`
			StreamID string `json:"stream_id"`
		}
		_ = json.Unmarshal(data, &req)
		if req.Type != "response.create" {
			continue
		}
		send := func(v map[string]any) {
			if req.StreamID != "" {
				v["stream_id"] = req.StreamID
			}
			b, _ := json.Marshal(v)
			_ = c.Write(ctx, websocket.MessageText, b)
		}
		send(map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_1", "status": "in_progress"}})
		switch req.Model {
		case "close":
			_ = c.Close(4001, "upstream says bye")
			return
		case "hold": // nothing more, but it goes on reading
			continue
		}
		send(map[string]any{"type": "response.output_text.delta", "delta": "hello there"})
		send(map[string]any{"type": "response.completed", "response": map[string]any{"id": "resp_1", "status": "completed",
			"usage": map[string]any{"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}}})
	}
}

// socketProxy is a test proxy in front of a wsUpstream, with one
// configured caller "alice" (key sk-alice).
func socketProxy(t *testing.T, up *wsUpstream, mutate func(*Config, *quota.Config)) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: up, environ: map[string]string{"ALICE_KEY": "sk-alice"},
		mutate: func(c *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			*callers = []classify.Caller{{Name: "alice", KeyEnv: "ALICE_KEY", Class: classify.Bulk}}
			if mutate != nil {
				mutate(c, q)
			}
		}})
}

// dialProxy opens a Responses WebSocket on p as alice.
func dialProxy(t *testing.T, p *testProxy, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	opts.HTTPHeader = http.Header{"Authorization": {"Bearer sk-alice"}, "Openai-Beta": {"responses_websockets=2026-02-06"}}
	c, resp, err := websocket.Dial(t.Context(), strings.Replace(p.URL, "http", "ws", 1)+"/v1/responses", opts)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// turn sends a response.create and reads events until one of types.
func turn(t *testing.T, c *websocket.Conn, create string, until ...string) []map[string]any {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(create)); err != nil {
		t.Fatal(err)
	}
	var events []map[string]any
	for {
		_, data, err := c.Read(t.Context())
		if err != nil {
			t.Fatalf("read: %v after %v", err, events)
		}
		var ev map[string]any
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		for _, u := range until {
			if ev["type"] == u {
				return events
			}
		}
	}
}

// socketsGone waits until p has no socket open and nothing in flight.
func socketsGone(t *testing.T, p *testProxy) {
	t.Helper()
	waitFor(t, "sockets closed", func() bool {
		return sumSeries(t, p, "meterproxy_sockets_open", nil) == 0 && sumSeries(t, p, "meterproxy_caller_in_flight", nil) == 0
	})
}

func TestSocketTurnsMeteredExactly(t *testing.T) {
	up := newWSUpstream()
	p := socketProxy(t, up, nil)
	c := dialProxy(t, p, nil)
	for range 2 {
		events := turn(t, c, `{"type":"response.create","model":"gpt-4o","input":"hi","max_output_tokens":50}`, "response.completed", "error")
		if last := events[len(events)-1]; last["type"] != "response.completed" {
			t.Fatalf("turn ended with %v", last)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	socketsGone(t, p)
	got := func(name string, l map[string]string) float64 { return sumSeries(t, p, name, l) }
	if n := got("meterproxy_tokens_total", map[string]string{"kind": "input", "estimated": "false", "caller": "alice"}); n != 22 {
		t.Errorf("input tokens = %v, want 22 (11 a turn, as reported)", n)
	}
	if n := got("meterproxy_tokens_total", map[string]string{"kind": "output", "estimated": "false", "caller": "alice"}); n != 14 {
		t.Errorf("output tokens = %v, want 14", n)
	}
	if n := got("meterproxy_tokens_total", map[string]string{"estimated": "true"}); n != 0 {
		t.Errorf("estimated tokens = %v, want 0", n)
	}
	if n := got("meterproxy_requests_total", map[string]string{"caller": "alice", "outcome": "forwarded", "code": "200"}); n != 2 {
		t.Errorf("forwarded requests = %v, want 2 (one a turn; the handshake is none)", n)
	}
	if n := got("meterproxy_admissions_total", map[string]string{"outcome": "admitted"}); n != 2 {
		t.Errorf("admitted = %v, want 2", n)
	}
	if n := got("meterproxy_socket_turns_total", map[string]string{"api": "responses", "outcome": "forwarded"}); n != 2 {
		t.Errorf("socket turns = %v, want 2", n)
	}
	if n := got("meterproxy_sockets_closed_total", map[string]string{"side": "client"}); n != 1 {
		t.Errorf("sockets closed by the client = %v, want 1", n)
	}
	if n := got("meterproxy_body_memory_bytes", nil); n != 0 {
		t.Errorf("body memory = %v, want 0 once the socket closed", n)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.headers.Get("Openai-Beta") != "responses_websockets=2026-02-06" || up.headers.Get("Sec-Websocket-Key") == "" {
		t.Errorf("upstream handshake headers = %v: OpenAI-Beta forwarded, its own key", up.headers)
	}
}

func TestSocketUpstreamCloseCodePassedThrough(t *testing.T) {
	up := newWSUpstream()
	p := socketProxy(t, up, nil)
	c := dialProxy(t, p, nil)
	if err := c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"response.create","model":"close","input":"x"}`)); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil {
		_, _, err = c.Read(t.Context())
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || ce.Reason != "upstream says bye" {
		t.Fatalf("client read ended with %v, want the upstream's close 4001", err)
	}
	socketsGone(t, p)
	// The turn had begun: forwarded and cut by the upstream, settled at
	// its worst case, counted once.
	if n := sumSeries(t, p, "meterproxy_requests_total", map[string]string{"outcome": "forwarded"}); n != 1 {
		t.Errorf("forwarded = %v, want 1", n)
	}
	if n := sumSeries(t, p, "meterproxy_responses_cut_short_total", map[string]string{"side": "upstream"}); n != 1 {
		t.Errorf("cut short by the upstream = %v, want 1", n)
	}
}

func TestSocketClientVanishingMidTurnFreesItsSlot(t *testing.T) {
	up := newWSUpstream()
	defer up.free()
	p := socketProxy(t, up, nil)
	c := dialProxy(t, p, nil)
	turn(t, c, `{"type":"response.create","model":"hold","input":"x"}`, "response.created")
	if n := sumSeries(t, p, "meterproxy_caller_in_flight", map[string]string{"caller": "alice"}); n != 1 {
		t.Fatalf("in flight = %v, want 1 during the turn", n)
	}
	_ = c.CloseNow() // gone, without a close frame
	socketsGone(t, p)
	if n := sumSeries(t, p, "meterproxy_requests_total", map[string]string{"caller": "alice"}); n != 1 {
		t.Errorf("requests = %v, want the turn counted once", n)
	}
	if n := sumSeries(t, p, "meterproxy_responses_cut_short_total", map[string]string{"side": "client"}); n != 1 {
		t.Errorf("cut by the client = %v, want 1", n)
	}
	if n := sumSeries(t, p, "meterproxy_tokens_total", map[string]string{"estimated": "true", "kind": "input"}); n == 0 {
		t.Errorf("the cut turn was not settled at an estimate")
	}
}

func TestSocketCompressionBombClosed1009(t *testing.T) {
	up := newWSUpstream()
	p := socketProxy(t, up, func(c *Config, _ *quota.Config) { c.Server.MaxSocketMessageBytes = 1 << 20 })
	c := dialProxy(t, p, &websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover})
	// 16 MiB of one byte, which deflate makes about 16 KiB of.
	const size = 16 << 20
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestCompression)
	_, _ = fw.Write(bytes.Repeat([]byte{' '}, size))
	_ = fw.Close()
	if z.Len() > 64<<10 {
		t.Fatalf("the bomb compresses to %d bytes: no bomb", z.Len())
	}
	w, err := c.Writer(t.Context(), websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	budget := p.handler.bodies.budget
	peak := make(chan int64, 1)
	go func() {
		var m int64
		_, _ = w.Write([]byte("{"))
		for range size / (64 << 10) {
			if _, err := w.Write(bytes.Repeat([]byte{' '}, 64<<10)); err != nil {
				break
			}
			m = max(m, budget.inUse())
		}
		_ = w.Close()
		peak <- m
	}()
	var rerr error
	for rerr == nil {
		_, _, rerr = c.Read(t.Context())
	}
	if code := websocket.CloseStatus(rerr); code != websocket.StatusMessageTooBig {
		t.Fatalf("close = %v (%v), want 1009", code, rerr)
	}
	if m := <-peak; m > 2<<20 {
		t.Errorf("body memory peaked at %v bytes reading a 16 MiB message under a 1 MiB limit", m)
	}
	socketsGone(t, p)
	if n := sumSeries(t, p, "meterproxy_requests_total", nil); n != 0 {
		t.Errorf("requests = %v, want none: nothing was a turn", n)
	}
}

func TestSocketHandshakeRefusals(t *testing.T) {
	up := newWSUpstream()
	p := newTestProxy(t, proxyOpts{upstream: up, mutate: func(_ *Config, _ *quota.Config, cc *classify.Config, _ *[]classify.Caller) {
		cc.UnknownCallers = classify.UnknownReject
	}})
	ws := strings.Replace(p.URL, "http", "ws", 1)
	if status := handshake(t, ws+"/v1/responses", http.Header{"Authorization": {"Bearer sk-nobody"}}); status != http.StatusUnauthorized {
		t.Errorf("unknown caller: %d, want 401 before any upgrade", status)
	}
	if status := handshake(t, ws+"/v1/chat/completions", nil); status != http.StatusUpgradeRequired {
		t.Errorf("upgrade elsewhere: %d, want the front door's 426", status)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.headers != nil {
		t.Errorf("the upstream was dialled for a refused handshake")
	}
}

func TestSocketQueueRefusalKeepsTheSocket(t *testing.T) {
	up := newWSUpstream()
	defer up.free()
	p := socketProxy(t, up, func(_ *Config, q *quota.Config) {
		q.Account.MaxInFlight = 1
		q.Classes.Bulk.MaxWait = 50 * time.Millisecond
	})
	c := dialProxy(t, p, nil)
	// One turn holds the only slot on lane a; the next, on lane b, waits
	// max_wait and is refused; the socket stays open.
	turn(t, c, `{"type":"response.create","model":"hold","input":"x","stream_id":"a"}`, "response.created")
	events := turn(t, c, `{"type":"response.create","model":"gpt-4o","input":"x","stream_id":"b"}`, "error")
	ev := events[len(events)-1]
	e, _ := ev["error"].(map[string]any)
	if ev["status"] != float64(429) || ev["stream_id"] != "b" || e["code"] != reasonMaxWait || e["type"] != "rate_limit_error" {
		t.Fatalf("refusal event = %v, want a 429 rate-limit error event on lane b", ev)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	socketsGone(t, p)
	if n := sumSeries(t, p, "meterproxy_refusals_total", map[string]string{"reason": reasonMaxWait}); n != 1 {
		t.Errorf("refusals = %v, want 1", n)
	}
}

func TestSocketConfigValidation(t *testing.T) {
	cfg := Config{Server: DefaultServerConfig(), Upstream: DefaultUpstreamConfig()}
	cfg.Server.MaxSocketMessageBytes = cfg.Server.MaxBodyMemoryBytes + 1
	if err := (Config{Server: DefaultServerConfig(), Upstream: DefaultUpstreamConfig()}).Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Server.MaxSocketMessagesPerSecond = 0
	cfg.Server.MaxSocketsPerCaller = -1
	cfg.Server.SocketIdleTimeout = 0
	err := cfg.Validate()
	for _, key := range []string{"server.max_socket_message_bytes", "server.max_socket_messages_per_second", "server.max_sockets_per_caller", "server.socket_idle_timeout"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate = %v, want it to name %s", err, key)
		}
	}
}

// handshake dials url with hdr and returns the status of the handshake's
// answer (0 when none came); a socket opened is closed.
func handshake(t *testing.T, url string, hdr http.Header) int {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: hdr})
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
