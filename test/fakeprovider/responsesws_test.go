package fakeprovider_test

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestResponsesSocketTurnEqualsSSE: a response.create on a socket is
// answered with the events of the same request over HTTP SSE, byte for
// byte, and logged with the same usage — on OpenAI's path and Azure's.
func TestResponsesSocketTurnEqualsSSE(t *testing.T) {
	// The HTTP body the event stands for: its fields less type, plus
	// "stream": true, keys sorted.
	const body = `{"input":[{"role":"user","content":"hi <there>"},{"role":"user","content":"again"}],"max_output_tokens":50,"metadata":{"a":"b"},"model":"gpt-test","stream":true}`
	const event = `{"type":"response.create","model":"gpt-test","input":[{"role":"user","content":"hi <there>"},{"role":"user","content":"again"}],"metadata":{"a":"b"},"max_output_tokens":50}`
	for _, path := range []string{"/v1/responses", "/openai/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{RPM: 600, TPM: 100000})
			_, hdr, b := post(t, srv, path, body)
			var want []string
			for _, m := range parseSSE(t, b) {
				want = append(want, m.data)
			}
			c := dial(t, srv, path, http.Header{"Authorization": {"Bearer sk-test"}})
			sendEvent(t, c, event)
			var got []string
			for _, ev := range readUntil(t, c, "response.completed") {
				got = append(got, ev.raw)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("socket events differ from SSE:\ngot  %q\nwant %q", got, want)
			}
			if err := p.WaitIdle(t.Context()); err != nil {
				t.Fatal(err)
			}
			reqs := p.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests logged, want 2", len(reqs))
			}
			httpReq, turn := reqs[0], reqs[1]
			if turn.Socket != fakeprovider.SocketResponses || httpReq.Socket != "" {
				t.Errorf("socket kinds %q, %q", httpReq.Socket, turn.Socket)
			}
			if turn.Usage == nil || !reflect.DeepEqual(turn.Usage, httpReq.Usage) {
				t.Errorf("turn usage %+v, HTTP usage %+v", turn.Usage, httpReq.Usage)
			}
			if want := promptTokens(body); turn.Usage.InputTokens != want {
				t.Errorf("input tokens %d, want %d (a quarter of the body the event stands for)", turn.Usage.InputTokens, want)
			}
			if turn.Header.Get("Authorization") != "Bearer sk-test" || turn.Status != http.StatusOK {
				t.Errorf("turn logged with status %d, authorization %q", turn.Status, turn.Header.Get("Authorization"))
			}
			// The buckets: one request each, the same prompt spent.
			if hdr.Get("x-ratelimit-remaining-requests") != "599" {
				t.Errorf("HTTP remaining requests %q", hdr.Get("x-ratelimit-remaining-requests"))
			}
			if httpReq.TokensRemaining-turn.TokensRemaining != promptTokens(body) {
				t.Errorf("tokens remaining %d then %d, want a difference of %d", httpReq.TokensRemaining, turn.TokensRemaining, promptTokens(body))
			}
			st := p.Stats()
			if st.Requests != 2 || st.Served != 2 || st.SocketTurns != 1 || st.ResponsesSockets != 1 || st.StreamsCompleted != 2 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// turnEvent is a response.create for lane (none when "") with input and
// metadata meta (a JSON object, or "").
func turnEvent(lane, input, meta string) string {
	s := `{"type":"response.create","model":"gpt-test","input":"` + input + `"`
	if lane != "" {
		s += `,"stream_id":"` + lane + `"`
	}
	if meta != "" {
		s += `,"metadata":` + meta
	}
	return s + "}"
}

// TestResponsesSocketLanes: turns on one stream_id run in order, lanes
// run side by side (a stalled lane holds up no other), and every event
// of a turn echoes its stream_id.
func TestResponsesSocketLanes(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/v1/responses", nil)
	sendEvent(t, c, turnEvent("b", "stalled", `{"x-fake-stall-after":"0"}`))
	sendEvent(t, c, turnEvent("a", "one", ""))
	sendEvent(t, c, turnEvent("a", "two", ""))
	sendEvent(t, c, turnEvent("", "own lane", ""))
	completed := map[string][]string{} // lane → response ids completed, in order
	seen := map[string]string{}        // response id → lane
	for len(completed["a"])+len(completed[""]) < 3 {
		ev := readEvent(t, c)
		lane, _ := ev.data["stream_id"].(string)
		id := str(ev.data, "response.id")
		if id == "" {
			continue
		}
		if l, ok := seen[id]; ok && l != lane {
			t.Fatalf("response %s on lanes %q and %q", id, l, lane)
		}
		seen[id] = lane
		if ev.typ == "response.completed" {
			if lane == "a" && len(completed["a"]) == 0 {
				for other, l := range seen {
					if l == "a" && other != id {
						t.Errorf("lane a: the second turn (%s) started before the first ended", other)
					}
				}
			}
			completed[lane] = append(completed[lane], id)
		}
	}
	if len(completed["b"]) != 0 {
		t.Errorf("the stalled lane completed %v", completed["b"])
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	lanes := map[string]int{}
	for _, r := range p.Requests() {
		lanes[r.StreamID]++
	}
	if lanes["a"] != 2 || lanes["b"] != 1 || lanes[""] != 1 {
		t.Errorf("logged lanes %v", lanes)
	}
	if st := p.Stats(); st.Served != 4 || st.StreamsCompleted != 3 || st.StreamsCut != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestResponsesSocketRateLimit: a turn the provider's limit refuses is an
// error event with status 429, the rate-limit error and the headers an
// HTTP 429 would carry; the socket stays open and the next turn, once
// the bucket refilled, completes.
func TestResponsesSocketRateLimit(t *testing.T) {
	clock := newClock()
	p, srv := newServer(t, fakeprovider.Config{RPM: 1, Now: clock.Now})
	c := dial(t, srv, "/v1/responses", nil)
	sendEvent(t, c, turnEvent("", "first", ""))
	readUntil(t, c, "response.completed")
	sendEvent(t, c, turnEvent("x", "refused", ""))
	ev := readEvent(t, c)
	if ev.typ != "error" || num(t, ev.data, "status") != 429 || str(ev.data, "error.type") != "rate_limit_error" ||
		str(ev.data, "error.code") != "rate_limit_exceeded" || str(ev.data, "error.message") == "" || str(ev.data, "stream_id") != "x" {
		t.Fatalf("refusal %s", ev.raw)
	}
	if str(ev.data, "headers.retry-after") == "" || str(ev.data, "headers.x-ratelimit-remaining-requests") != "0" {
		t.Errorf("refusal headers %v", ev.data["headers"])
	}
	clock.Advance(2 * time.Minute) // the refusal was debited too: -1 + 2
	sendEvent(t, c, turnEvent("", "third", ""))
	if evs := readUntil(t, c, "response.completed", "error"); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("after the refill: %s", evs[len(evs)-1].raw)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Requests != 3 || st.Served != 2 || st.RateLimited != 1 || st.SocketTurns != 3 {
		t.Errorf("stats %+v", st)
	}
}

// TestSocketMaxAge: a socket past Config.WSMaxAge gets the provider's
// error event and a normal close — by the clock on its next event, or by
// the timer while idle.
func TestSocketMaxAge(t *testing.T) {
	tests := []struct {
		name, path, first string
		timer             bool
		wantCode          string
	}{
		{"responses by the clock", "/v1/responses", turnEvent("", "late", ""), false, "websocket_connection_limit_reached"},
		{"responses by the timer", "/v1/responses", "", true, "websocket_connection_limit_reached"},
		{"realtime by the clock", "/v1/realtime", `{"type":"response.create"}`, false, "session_expired"},
		{"realtime by the timer", "/v1/realtime", "", true, "session_expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			cfg := fakeprovider.Config{WSMaxAge: time.Hour, Now: clock.Now}
			if tc.timer {
				cfg.WSMaxAge = 20 * time.Millisecond
			}
			p, srv := newServer(t, cfg)
			c := dial(t, srv, tc.path, nil)
			if tc.path == "/v1/realtime" && !tc.timer {
				readEvent(t, c) // session.created
			}
			if !tc.timer {
				clock.Advance(time.Hour)
				sendEvent(t, c, tc.first)
			}
			ev := readUntil(t, c, "error")
			if last := ev[len(ev)-1]; str(last.data, "error.code") != tc.wantCode {
				t.Errorf("error event %s, want %s", last.raw, tc.wantCode)
			}
			if got := closeStatus(t, c); got != websocket.StatusNormalClosure {
				t.Errorf("close status %v, want 1000", got)
			}
			if err := p.WaitIdle(t.Context()); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.SocketsMaxAge != 1 || st.Requests != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestSocketMessageTooBig: a client message over Config.WSMaxMessageBytes
// closes the socket with 1009.
func TestSocketMessageTooBig(t *testing.T) {
	for _, path := range []string{"/v1/responses", "/v1/realtime"} {
		t.Run(path, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{WSMaxMessageBytes: 1024})
			c := dial(t, srv, path, nil)
			sendEvent(t, c, turnEvent("", strings.Repeat("x", 2048), ""))
			if got := closeStatus(t, c); got != websocket.StatusMessageTooBig {
				t.Errorf("close status %v, want 1009", got)
			}
		})
	}
}

// TestResponsesSocketBadEvents: a message that is no response.create is
// answered with a 400 error event and the socket goes on.
func TestResponsesSocketBadEvents(t *testing.T) {
	tests := []struct{ name, msg, code, param string }{
		{"not JSON", `{"type":`, "invalid_json", ""},
		{"an array", `[1,2]`, "invalid_json", ""},
		{"no type", `{"model":"m"}`, "invalid_event", "type"},
		{"another type", `{"type":"response.cancel"}`, "invalid_event", "type"},
		{"background", `{"type":"response.create","background":true}`, "unsupported_parameter", "background"},
		{"stream_id not a string", `{"type":"response.create","stream_id":7}`, "invalid_value", "stream_id"},
	}
	p, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/v1/responses", nil)
	for _, tc := range tests {
		sendEvent(t, c, tc.msg)
		ev := readEvent(t, c)
		if ev.typ != "error" || num(t, ev.data, "status") != 400 || str(ev.data, "error.type") != "invalid_request_error" ||
			str(ev.data, "error.code") != tc.code || str(ev.data, "error.param") != tc.param || str(ev.data, "error.message") == "" {
			t.Errorf("%s: %s, want code %s param %q", tc.name, ev.raw, tc.code, tc.param)
		}
	}
	if err := c.Write(t.Context(), websocket.MessageBinary, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if ev := readEvent(t, c); ev.typ != "error" {
		t.Errorf("binary message answered %s", ev.raw)
	}
	sendEvent(t, c, `{"type":"response.create","stream":true,"input":"still open"}`) // stream is implicit, and allowed
	readUntil(t, c, "response.completed")
	if st := p.Stats(); st.SocketErrors != len(tests)+1 {
		t.Errorf("socket errors %d, want %d", st.SocketErrors, len(tests)+1)
	}
}

// TestSocketCutAt: X-Fake-Cut-At (a turn's metadata on a socket, a header
// over HTTP) cuts the transport at each point of a turn: the socket
// without a close frame, after as many events as the point says.
func TestSocketCutAt(t *testing.T) {
	const total = 4 + fakeprovider.DefaultStreamChunks + 4 // head, deltas, tail
	tests := []struct {
		cut  fakeprovider.CutAt
		sent int
	}{
		{fakeprovider.CutAfterCreated, 1},
		{fakeprovider.CutMidDeltas, 4 + 3},
		{fakeprovider.CutBeforeTerminal, total - 1},
		{fakeprovider.CutAfterTerminal, total},
	}
	for _, tc := range tests {
		t.Run(string(tc.cut), func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{})
			c := dial(t, srv, "/v1/responses", nil)
			sendEvent(t, c, turnEvent("", "cut", `{"x-fake-cut-at":"`+string(tc.cut)+`"}`))
			n := 0
			for {
				ev, err := tryReadEvent(t, c)
				if err != nil {
					if _, ok := errors.AsType[websocket.CloseError](err); ok {
						t.Errorf("closed with a close frame: %v", err)
					}
					break
				}
				if ev.typ == "error" {
					t.Fatalf("error event %s", ev.raw)
				}
				n++
			}
			if n != tc.sent {
				t.Errorf("%d events before the cut, want %d", n, tc.sent)
			}
			if err := p.WaitIdle(t.Context()); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.StreamsAborted != 1 {
				t.Errorf("stats %+v", st)
			}

			// The same knob over HTTP: the events, then no proper end.
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/responses",
				strings.NewReader(`{"input":"cut","stream":true}`))
			req.Header.Set(fakeprovider.HeaderCutAt, string(tc.cut))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil {
				t.Errorf("HTTP stream ended properly")
			}
			if got := strings.Count(string(b), "\n\n"); got != tc.sent {
				t.Errorf("HTTP: %d events before the cut, want %d", got, tc.sent)
			}
		})
	}
}

// TestResponsesFailAfter: X-Fake-Fail-After ends a Responses stream with
// response.failed carrying the usage of what was sent, over a socket as
// over HTTP; X-Fake-Terminal-Delay holds the terminal event back and a
// bad value is a 400 error event.
func TestResponsesFailAfter(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/v1/responses", nil)
	sendEvent(t, c, turnEvent("", "fail", `{"x-fake-fail-after":"2","x-fake-terminal-delay":"1ms"}`))
	evs := readUntil(t, c, "response.failed", "response.completed")
	last := evs[len(evs)-1]
	if last.typ != "response.failed" || str(last.data, "response.status") != "failed" || str(last.data, "response.error.code") != "server_error" {
		t.Fatalf("terminal %s", last.raw)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.typ == "response.output_text.delta" {
			deltas++
		}
	}
	// Two chunks of reply1 split five ways: "echo:" and " 1 messages".
	if deltas != 2 || num(t, last.data, "response.usage.output_tokens") != 3 {
		t.Errorf("%d deltas, output tokens %d; want 2 and 3", deltas, num(t, last.data, "response.usage.output_tokens"))
	}
	sendEvent(t, c, turnEvent("", "bad knob", `{"x-fake-terminal-delay":"soon"}`))
	if ev := readEvent(t, c); ev.typ != "error" || num(t, ev.data, "status") != 400 {
		t.Errorf("bad knob answered %s", ev.raw)
	}
	_, _, b := send(t, srv, http.MethodPost, "/v1/responses", `{"input":"fail","stream":true}`,
		map[string]string{fakeprovider.HeaderFailAfter: "2"})
	msgs := parseSSE(t, b)
	if got := msgs[len(msgs)-1]; got.event != "response.failed" {
		t.Errorf("HTTP terminal %s", got.event)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Served != 2 || st.Failed != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestSocketPing: a ping is answered with a pong on both sockets.
func TestSocketPing(t *testing.T) {
	for _, path := range []string{"/v1/responses", "/openai/realtime?deployment=d"} {
		t.Run(path, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			c := dial(t, srv, path, nil)
			if strings.Contains(path, "realtime") {
				readEvent(t, c) // session.created
			}
			ctx := c.CloseRead(t.Context()) // reads control frames, so the pong is seen
			if err := c.Ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			_ = c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

// TestResponsesSocketWarmup: generate false (a warmup) completes without
// output, its usage the input alone.
func TestResponsesSocketWarmup(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/v1/responses", nil)
	sendEvent(t, c, `{"type":"response.create","model":"m","input":"prepare","generate":false}`)
	evs := readUntil(t, c, "response.completed")
	if len(evs) != 3 || evs[0].typ != "response.created" {
		t.Fatalf("warmup events %v", evs)
	}
	done := evs[2].data
	in := promptTokens(`{"generate":false,"input":"prepare","model":"m","stream":true}`)
	if num(t, done, "response.usage.output_tokens") != 0 || num(t, done, "response.usage.input_tokens") != in ||
		len(done["response"].(map[string]any)["output"].([]any)) != 0 {
		t.Errorf("warmup %s, want input %d and no output", evs[2].raw, in)
	}
}
