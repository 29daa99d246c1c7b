package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// The Realtime sessions' bounds: max_sessions and the budgets, at the
// handshake and mid-session.

// TestRealtimeMaxSessions: the sessions of a caller past its
// max_sessions, and of a class past its own, are refused at the
// handshake with 429 too_many_sessions, and the upstream is never
// dialled for them; a closed session gives its place back.
func TestRealtimeMaxSessions(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, func(_ *Config, q *quota.Config, callers *[]classify.Caller) {
		q.Classes.Bulk.MaxSessions = 2
		(*callers)[1].MaxSessions = 1
	})
	const path = "/v1/realtime?model=gpt-realtime"
	refused := func(key, why string) {
		t.Helper()
		if status, body := refusedRT(t, p, key, path); status != http.StatusTooManyRequests || body.Error.Code != reasonTooManySessions ||
			body.Error.Type != "rate_limit_error" {
			t.Errorf("%s: %d %+v, want 429 too_many_sessions", why, status, body)
		}
	}
	bob := openRT(t, p, "sk-bob", path)
	refused("sk-bob", "bob's second session (callers[].max_sessions 1)")
	a1 := openRT(t, p, "sk-alice", path)
	openRT(t, p, "sk-alice", path)
	refused("sk-alice", "bulk's third session (classes.bulk.max_sessions 2)")
	for l, want := range map[[2]string]float64{{"bulk", "alice"}: 2, {"interactive", "bob"}: 1} {
		if n := sumSeries(t, p, "meterproxy_realtime_sessions", map[string]string{"class": l[0], "caller": l[1]}); n != want {
			t.Errorf("sessions of %v = %v, want %v", l, n, want)
		}
	}
	if n := sumSeries(t, p, "meterproxy_refusals_total", map[string]string{"reason": reasonTooManySessions}); n != 2 {
		t.Errorf("refusals = %v, want 2", n)
	}
	if n := fp.Stats().RealtimeSessions; n != 3 {
		t.Errorf("the fake saw %d sessions, want 3: a refused handshake dials nothing", n)
	}
	_ = a1.Close(websocket.StatusNormalClosure, "")
	_ = bob.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "a place back", func() bool {
		return sumSeries(t, p, "meterproxy_realtime_sessions", map[string]string{"caller": "alice"}) == 1 &&
			sumSeries(t, p, "meterproxy_realtime_sessions", map[string]string{"caller": "bob"}) == 0
	})
	openRT(t, p, "sk-alice", path)
	openRT(t, p, "sk-bob", path)
}

// TestRealtimeBudgetAtHandshake: once the caller's budget is spent, its
// next session is refused at the handshake as its HTTP request would
// be (429 budget_exceeded); a model no price matches, under a budget
// that refuses unpriced models, is refused 400 unpriced_model.
func TestRealtimeBudgetAtHandshake(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, func(_ *Config, q *quota.Config, callers *[]classify.Caller) {
		// The response's worst case at what the proxy sees (the
		// response.create alone, and max_output's 9 tokens) fits $0.01;
		// what it costs (the conversation's 100 tokens of input) does not.
		q.Prices = []price.Price{{Match: []string{"gpt-realtime"}, Input: 50, Output: 1_000, MaxInput: 1000, MaxOutput: 9}}
		(*callers)[0].Budget = classify.Budget{USD: 0.01, Per: classify.PerDay}
	})
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	rtSend(t, c, rtTextOnly)
	rtSend(t, c, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"`+
		strings.Repeat("word ", 60)+`"}]}}`)
	rtSend(t, c, `{"type":"response.create"}`)
	if evs := rtUntil(t, c, "response.done", "error"); evs[len(evs)-1]["type"] != "response.done" {
		t.Fatalf("response ended with %v", evs[len(evs)-1])
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	rtGone(t, p)
	waitFor(t, "the budget spent", func() bool {
		for _, b := range p.admitter.State().Budgets {
			if b.Budget == "caller:alice" && b.Spent >= b.Limit {
				return true
			}
		}
		return false
	})
	for path, want := range map[string]struct {
		status int
		code   string
	}{
		"/v1/realtime?model=gpt-realtime":  {http.StatusTooManyRequests, reasonBudgetExceeded},
		"/v1/realtime?model=gpt-unpriced":  {http.StatusBadRequest, reasonUnpricedModel},
		"/v1/realtime?model=a&model=b":     {http.StatusBadRequest, reasonBadRequest},
		"/openai/realtime?deployment=bad.": {http.StatusBadRequest, reasonBadRequest},
	} {
		if status, body := refusedRT(t, p, "sk-alice", path); status != want.status || body.Error.Code != want.code {
			t.Errorf("%s: %d %+v, want %d %s", path, status, body, want.status, want.code)
		}
	}
	if n := fp.Stats().RealtimeSessions; n != 1 {
		t.Errorf("the fake saw %d sessions, want 1", n)
	}
}

// TestRealtimeBudgetRunsOutMidSession: once the caller's budget is
// spent by a response the server's voice detection created (unheld,
// charged past the budget), the client's next response.create is
// answered with an error event naming it and the session goes on; the
// next response the server creates closes the session — an error event
// in the provider's shape, then a close 1008 — and leaves nothing in
// flight.
func TestRealtimeBudgetRunsOutMidSession(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Config{})
	p := rtProxy(t, fp, func(_ *Config, q *quota.Config, callers *[]classify.Caller) {
		q.Prices = []price.Price{{Match: []string{"gpt-realtime"}, Input: 50, Output: 1_000, MaxInput: 1000, MaxOutput: 9}}
		(*callers)[0].Budget = classify.Budget{USD: 0.01, Per: classify.PerDay}
	})
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	speak := func() {
		rtSend(t, c, `{"type":"input_audio_buffer.append","audio":"`+base64.StdEncoding.EncodeToString(make([]byte, 4800))+`"}`)
		rtSend(t, c, `{"type":"input_audio_buffer.commit"}`)
	}
	speak()
	rtUntil(t, c, "response.done") // 9 words spoken: 45 output tokens, $0.045
	waitFor(t, "the budget spent", func() bool {
		for _, b := range p.admitter.State().Budgets {
			if b.Budget == "caller:alice" && b.Spent >= b.Limit {
				return true
			}
		}
		return false
	})
	rtSend(t, c, `{"type":"response.create","event_id":"c1"}`)
	ev := rtUntil(t, c, "error")
	e, _ := ev[len(ev)-1]["error"].(map[string]any)
	if e["code"] != reasonBudgetExceeded || e["type"] != "insufficient_quota" || e["event_id"] != "c1" {
		t.Fatalf("response.create past the budget answered %v, want a budget_exceeded error naming c1", ev[len(ev)-1])
	}
	speak() // the session goes on, and the server creates a response it cannot hold
	var closing map[string]any
	var err error
	for err == nil {
		var data []byte
		if _, data, err = c.Read(t.Context()); err == nil {
			var ev map[string]any
			_ = json.Unmarshal(data, &ev)
			if ev["type"] == "error" {
				closing = ev
			}
		}
	}
	if e, _ := closing["error"].(map[string]any); e["code"] != reasonBudgetExceeded || e["type"] != "insufficient_quota" {
		t.Errorf("last error event %v, want budget_exceeded", closing)
	}
	if !errClosed(err, websocket.StatusPolicyViolation) {
		t.Errorf("session ended with %v, want a close 1008", err)
	}
	rtGone(t, p)
	if n := sumSeries(t, p, "meterproxy_realtime_unheld_responses_total", nil); n != 2 {
		t.Errorf("unheld = %v, want 2", n)
	}
	if n := sumSeries(t, p, "meterproxy_sockets_closed_total", map[string]string{"api": "realtime", "side": "meterproxy"}); n != 1 {
		t.Errorf("sessions closed by meterproxy = %v, want 1", n)
	}
	if n := sumSeries(t, p, "meterproxy_refusals_total", map[string]string{"reason": reasonBudgetExceeded}); n != 1 {
		t.Errorf("budget refusals = %v, want the response.create's 1", n)
	}
}

// errClosed reports whether err is a close with code.
func errClosed(err error, code websocket.StatusCode) bool {
	var ce websocket.CloseError
	return errors.As(err, &ce) && ce.Code == code
}

// silentRealtime is a Realtime upstream that opens a session and then
// answers nothing: every response.create stays pending.
type silentRealtime struct{}

func (silentRealtime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer func() { _ = c.CloseNow() }()
	_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"session.created","session":{"id":"sess_1"}}`))
	for {
		if _, _, err := c.Read(context.Background()); err != nil {
			return
		}
	}
}

// TestRealtimePendingBound: a session holds at most maxRealtimeTurns
// responses pending or in progress; one more is refused with an error
// event naming it, and the session goes on; closing it settles them all.
func TestRealtimePendingBound(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: silentRealtime{}, environ: map[string]string{"ALICE_KEY": "sk-alice"},
		mutate: func(_ *Config, _ *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			*callers = []classify.Caller{{Name: "alice", KeyEnv: "ALICE_KEY", Class: classify.Bulk}}
		}})
	c := openRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	for range maxRealtimeTurns {
		rtSend(t, c, `{"type":"response.create"}`)
	}
	rtSend(t, c, `{"type":"response.create","event_id":"one-more"}`)
	ev := rtRead(t, c)
	if e, _ := ev["error"].(map[string]any); ev["type"] != "error" || e["event_id"] != "one-more" || e["code"] != reasonBadRequest {
		t.Fatalf("the response past the bound answered %v", ev)
	}
	if n := sumSeries(t, p, "meterproxy_caller_in_flight", map[string]string{"caller": "alice"}); n != maxRealtimeTurns {
		t.Errorf("in flight = %v, want %d", n, maxRealtimeTurns)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	rtGone(t, p)
	if n := sumSeries(t, p, "meterproxy_requests_total", map[string]string{"caller": "alice"}); n != maxRealtimeTurns+1 {
		t.Errorf("requests = %v, want every response once", n)
	}
}
