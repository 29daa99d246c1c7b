package fakeprovider_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// rtItem is a user text item of conversation.item.create, as the client
// sends it: its bytes over four are its text tokens.
const rtItem = `{"type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}`

// textOnly turns server VAD off and answers in text.
const textOnly = `{"type":"session.update","session":{"type":"realtime","output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`

// TestRealtimeSession: a session's responses carry their usage in
// response.done — the conversation as input, the last response's input
// as cached, the reply's words as output — each followed by
// rate_limits.updated from the provider's own buckets, and each logged as
// a request with that usage.
func TestRealtimeSession(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{RPM: 600, TPM: 100000})
	c := dial(t, srv, "/v1/realtime?model=gpt-realtime", http.Header{"Authorization": {"Bearer sk-test"}})
	created := readEvent(t, c)
	if created.typ != "session.created" || str(created.data, "session.model") != "gpt-realtime" ||
		str(created.data, "session.audio.input.turn_detection.type") != "server_vad" {
		t.Fatalf("first event %s", created.raw)
	}
	sendEvent(t, c, textOnly)
	if ev := readEvent(t, c); ev.typ != "session.updated" || !strings.Contains(ev.raw, `"turn_detection":null`) {
		t.Fatalf("session.update answered %s", ev.raw)
	}
	sendEvent(t, c, `{"type":"conversation.item.create","event_id":"c1","item":`+rtItem+`}`)
	if ev := readEvent(t, c); ev.typ != "conversation.item.created" || str(ev.data, "item.status") != "completed" {
		t.Fatalf("item event %s", ev.raw)
	}
	in := promptTokens(rtItem)
	const out = 9 // reply1's words
	sendEvent(t, c, `{"type":"response.create","event_id":"c2"}`)
	evs := readUntil(t, c, "response.done")
	var text string
	for _, ev := range evs {
		if ev.typ == "response.output_text.delta" {
			text += str(ev.data, "delta")
		}
	}
	if text != reply1 || evs[0].typ != "response.created" {
		t.Errorf("deltas %q, first event %s", text, evs[0].typ)
	}
	done := evs[len(evs)-1].data
	checkRTUsage(t, done, in, 0, out)
	limits := readEvent(t, c)
	if limits.typ != "rate_limits.updated" {
		t.Fatalf("after response.done: %s", limits.raw)
	}
	want := `"rate_limits":[{"limit":600,"name":"requests","remaining":599,"reset_seconds":0.1},` +
		`{"limit":100000,"name":"tokens","remaining":` + strconv.Itoa(100000-in) + `,"reset_seconds":`
	if !strings.Contains(limits.raw, want) {
		t.Errorf("rate limits %s, want %s…", limits.raw, want)
	}

	// The second response: the conversation grew by the reply, and the
	// first response's input is cached.
	sendEvent(t, c, `{"type":"response.create"}`)
	evs = readUntil(t, c, "response.done")
	checkRTUsage(t, evs[len(evs)-1].data, in+out, in, out)
	readUntil(t, c, "rate_limits.updated")

	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, wantIn := range []int{in, in + out} {
		r := reqs[i]
		if r.Socket != fakeprovider.SocketRealtime || r.Status != http.StatusOK || r.Usage == nil ||
			r.Usage.InputTokens != wantIn || r.Usage.InputTextTokens != wantIn || r.Usage.OutputTokens != out || r.ServerCreated {
			t.Errorf("request %d: %+v usage %+v", i, r, r.Usage)
		}
	}
	st := p.Stats()
	if st.RealtimeSessions != 1 || st.RealtimeResponses != 2 || st.Served != 2 || st.ServerResponses != 0 {
		t.Errorf("stats %+v", st)
	}
}

// checkRTUsage checks response.done's usage: input tokens (all text),
// cached of them, output tokens (all text).
func checkRTUsage(t *testing.T, done map[string]any, in, cached, out int) {
	t.Helper()
	for path, want := range map[string]int{
		"response.usage.input_tokens":                                          in,
		"response.usage.input_token_details.text_tokens":                       in,
		"response.usage.input_token_details.audio_tokens":                      0,
		"response.usage.input_token_details.cached_tokens":                     cached,
		"response.usage.input_token_details.cached_tokens_details.text_tokens": cached,
		"response.usage.output_tokens":                                         out,
		"response.usage.output_token_details.text_tokens":                      out,
		"response.usage.output_token_details.audio_tokens":                     0,
		"response.usage.total_tokens":                                          in + out,
	} {
		if got := num(t, done, path); got != want {
			t.Errorf("%s = %d, want %d", path, got, want)
		}
	}
	if str(done, "response.status") != "completed" {
		t.Errorf("status %q", str(done, "response.status"))
	}
}

// TestRealtimeServerVAD: with server VAD (the default) a commit makes the
// server create a response itself, spoken, its input the committed audio
// (100 ms a token); without it a commit creates none.
func TestRealtimeServerVAD(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/openai/realtime?api-version=2025-08-28&deployment=gpt-realtime", nil)
	readEvent(t, c)                                                // session.created
	audio := base64.StdEncoding.EncodeToString(make([]byte, 9600)) // 200 ms: 2 tokens
	sendEvent(t, c, `{"type":"input_audio_buffer.append","audio":"`+audio+`"}`)
	sendEvent(t, c, `{"type":"input_audio_buffer.commit"}`)
	evs := readUntil(t, c, "response.done")
	types := make([]string, 0, len(evs))
	for _, ev := range evs {
		types = append(types, ev.typ)
	}
	if types[0] != "input_audio_buffer.committed" || !contains(types, "response.created") || !contains(types, "response.output_audio_transcript.delta") {
		t.Errorf("events %v", types)
	}
	done := evs[len(evs)-1].data
	const words = 9
	for path, want := range map[string]int{
		"response.usage.input_tokens":                      2,
		"response.usage.input_token_details.audio_tokens":  2,
		"response.usage.output_token_details.text_tokens":  words,
		"response.usage.output_token_details.audio_tokens": 4 * words,
		"response.usage.output_tokens":                     5 * words,
	} {
		if got := num(t, done, path); got != want {
			t.Errorf("%s = %d, want %d", path, got, want)
		}
	}
	if ev := readEvent(t, c); ev.typ != "rate_limits.updated" {
		t.Errorf("after response.done: %s", ev.raw)
	}

	// Turn detection off: a commit is an item, no response.
	sendEvent(t, c, `{"type":"session.update","session":{"turn_detection":null}}`)
	readUntil(t, c, "session.updated")
	sendEvent(t, c, `{"type":"input_audio_buffer.append","audio":"`+audio+`"}`)
	sendEvent(t, c, `{"type":"input_audio_buffer.commit"}`)
	readUntil(t, c, "conversation.item.created")
	sendEvent(t, c, `{"type":"no.such.event","event_id":"e9"}`)
	if ev := readEvent(t, c); ev.typ != "error" || str(ev.data, "error.event_id") != "e9" {
		t.Errorf("after a commit without VAD: %s, want the error for e9", ev.raw)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if len(reqs) != 1 || !reqs[0].ServerCreated || reqs[0].Usage.InputAudioTokens != 2 {
		t.Errorf("requests %+v", reqs)
	}
	if st := p.Stats(); st.ServerResponses != 1 || st.RealtimeResponses != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestRealtimeRateLimit: a response the provider's limit refuses — the
// session model's own limit here — is an error event
// (rate_limit_exceeded) and rate_limits.updated; the session goes on.
func TestRealtimeRateLimit(t *testing.T) {
	clock := newClock()
	p, srv := newServer(t, fakeprovider.Config{RPM: 1000, Models: []fakeprovider.ModelLimits{{Name: "gpt-realtime", RPM: 1}}, Now: clock.Now})
	c := dial(t, srv, "/v1/realtime?model=gpt-realtime", nil)
	readEvent(t, c)
	sendEvent(t, c, textOnly)
	readEvent(t, c)
	sendEvent(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "rate_limits.updated")
	sendEvent(t, c, `{"type":"response.create","event_id":"c2"}`)
	ev := readEvent(t, c)
	if ev.typ != "error" || str(ev.data, "error.code") != "rate_limit_exceeded" || str(ev.data, "error.event_id") != "c2" {
		t.Fatalf("refusal %s", ev.raw)
	}
	if ev := readEvent(t, c); ev.typ != "rate_limits.updated" || !strings.Contains(ev.raw, `"limit":1,"name":"requests","remaining":0`) {
		t.Errorf("after the refusal: %s", ev.raw)
	}
	clock.Advance(2 * time.Minute) // the refusal was debited too: -1 + 2
	sendEvent(t, c, `{"type":"response.create"}`)
	if evs := readUntil(t, c, "response.done", "error"); evs[len(evs)-1].typ != "response.done" {
		t.Errorf("after the window: %s", evs[len(evs)-1].raw)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	if err := p.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.RateLimited != 1 || st.Served != 2 || st.Requests != 3 {
		t.Errorf("stats %+v", st)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestRealtimeCancelAndCut: response.cancel ends a response with
// response.done cancelled, its usage the output sent; a response's
// x-fake-cut-at metadata cuts the socket there.
func TestRealtimeCancelAndCut(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{})
	c := dial(t, srv, "/v1/realtime?model=m", nil)
	readEvent(t, c)
	sendEvent(t, c, textOnly)
	readEvent(t, c)
	sendEvent(t, c, `{"type":"response.create","response":{"metadata":{"x-fake-stall-after":"1"}}}`)
	readUntil(t, c, "response.output_text.delta") // "echo:", then the stall
	sendEvent(t, c, `{"type":"response.cancel"}`)
	evs := readUntil(t, c, "response.done")
	done := evs[len(evs)-1].data
	if str(done, "response.status") != "cancelled" || str(done, "response.status_details.reason") != "client_cancelled" ||
		num(t, done, "response.usage.output_tokens") != 1 {
		t.Errorf("cancelled response %s", evs[len(evs)-1].raw)
	}
	if ev := readEvent(t, c); ev.typ != "rate_limits.updated" {
		t.Errorf("after the cancel: %s", ev.raw)
	}
	sendEvent(t, c, `{"type":"response.cancel","event_id":"c3"}`)
	if ev := readEvent(t, c); str(ev.data, "error.code") != "response_cancel_not_active" {
		t.Errorf("a cancel without a response: %s", ev.raw)
	}
	sendEvent(t, c, `{"type":"response.create","response":{"metadata":{"x-fake-cut-at":"after_created"}}}`)
	if ev := readEvent(t, c); ev.typ != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	if got := closeStatus(t, c); got != -1 {
		t.Errorf("closed with %v, want a cut", got)
	}
	if err := p.WaitSocketsClosed(t.Context()); err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if len(reqs) != 2 || reqs[0].Usage == nil || reqs[0].Usage.OutputTokens != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	if st := p.Stats(); st.Served != 2 || st.StreamsCompleted != 1 || st.StreamsAborted != 1 || st.RealtimeSessionsOpen != 0 {
		t.Errorf("stats %+v", st)
	}
}
