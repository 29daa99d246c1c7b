package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// One Realtime response: admitted by the rate limit as a request, played
// with the stream knobs, settled in response.done, followed by
// rate_limits.updated.

// rtCreate is the part of response.create's response the fake reads.
type rtCreate struct {
	OutputModalities        []string          `json:"output_modalities"`
	Modalities              []string          `json:"modalities"`
	MaxOutputTokens         json.RawMessage   `json:"max_output_tokens"`
	MaxResponseOutputTokens json.RawMessage   `json:"max_response_output_tokens"`
	Metadata                map[string]string `json:"metadata"`
}

// rtTurn is one response being answered.
type rtTurn struct {
	rt            *realtimeSession
	act           *activeResponse
	x             *exchange
	resp          rtResponse
	rep           reply
	audio         bool
	itemID, prev  string
	inText        int
	inAudio       int
	cachedText    int
	cachedAudio   int
	serverCreated bool
	clientEvent   string
	model         string
}

// startResponse creates a response for ev (a response.create; empty for
// one the server creates) and answers it on a goroutine of its own. A
// response already in progress refuses a second one.
func (rt *realtimeSession) startResponse(ev realtimeClientEvent, serverCreated bool) error {
	var c rtCreate
	if ev.Response != nil && !isNull(ev.Response) {
		if err := json.Unmarshal(ev.Response, &c); err != nil {
			return &eventError{code: "invalid_value", param: "response", message: "The response could not be parsed: " + err.Error()}
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.active != nil {
		return &eventError{code: "conversation_already_has_active_response",
			message: fmt.Sprintf("Conversation already has an active response in progress: %s.", rt.active.id)}
	}
	rt.seq++
	t := &rtTurn{rt: rt, serverCreated: serverCreated, clientEvent: ev.EventID, prev: rt.lastItem, model: rt.session.Model,
		inText: rt.text, inAudio: rt.audio, cachedText: min(rt.cachedText, rt.text), cachedAudio: min(rt.cachedAudio, rt.audio)}
	t.resp = rtResponse{Object: "realtime.response", ID: fmt.Sprintf("resp_%s_%d", rt.tag, rt.seq),
		ConversationID: "conv_" + rt.tag, OutputModalities: rt.session.OutputModalities, MaxOutputTokens: rt.session.MaxOutputTokens}
	if m := c.OutputModalities; m != nil {
		t.resp.OutputModalities = m
	} else if m := c.Modalities; m != nil {
		t.resp.OutputModalities = []string{"text"}
		if contains(m, "audio") {
			t.resp.OutputModalities = []string{"audio"}
		}
	}
	for _, raw := range []json.RawMessage{c.MaxResponseOutputTokens, c.MaxOutputTokens} {
		if n, ok := maxTokens(raw); ok {
			t.resp.MaxOutputTokens = n
		}
	}
	if c.Metadata != nil {
		t.resp.Metadata = c.Metadata
	}
	t.audio = contains(t.resp.OutputModalities, "audio")
	limit, _ := t.resp.MaxOutputTokens.(int)
	t.rep = newReply(rt.items, limit, rt.p.cfg.StreamChunks)
	t.itemID = fmt.Sprintf("item_%s_r%d", rt.tag, rt.seq)
	ctx, cancel := context.WithCancel(rt.ctx)
	t.act = &activeResponse{id: t.resp.ID, ctx: ctx, cancel: cancel}
	rt.active = t.act
	t.x = rt.exchangeFor(t.act, ev.Response, c.Metadata)
	rt.responses.Go(t.run)
	return nil
}

// exchangeFor is the exchange a response is answered through: a request
// on the session's path with its upgrade's headers and the response's
// x-fake-* metadata as knobs, its body the response.create's response.
func (rt *realtimeSession) exchangeFor(act *activeResponse, body json.RawMessage, meta map[string]string) *exchange {
	if body == nil {
		body = json.RawMessage("{}")
	}
	r, _ := http.NewRequestWithContext(act.ctx, http.MethodPost, rt.path, bytes.NewReader(body)) // the path came from an accepted request
	r.Header = rt.header.Clone()
	for k, v := range meta {
		if strings.HasPrefix(strings.ToLower(k), "x-fake-") {
			r.Header.Set(k, v)
		}
	}
	return &exchange{p: rt.p, w: &turnWriter{header: make(http.Header)}, r: r, body: body, now: rt.p.cfg.Now(),
		api: apiFor(rt.path), sink: rtSink{rt: rt, ctx: act.ctx}, socket: SocketRealtime}
}

// run answers the response and ends it: done, cancelled, refused or cut.
func (t *rtTurn) run() {
	rt, x := t.rt, t.x
	defer func() {
		t.release()
		t.act.cancel()
	}()
	in := t.inText + t.inAudio
	x.arr = rt.p.arriveTurn(x.r, x.body, x.now, turnInfo{socket: SocketRealtime, limited: true, serverCreated: t.serverCreated,
		charge: &turnCharge{model: t.model, prompt: in, fields: chargeFields{MaxOutputTokens: intOr(t.resp.MaxOutputTokens)}}})
	defer func() { rt.p.finish(x.arr, x.status, x.outcome, false, x.usage) }()
	if !x.arr.admitted {
		t.release()
		x.status = http.StatusTooManyRequests
		rt.send(realtimeError("rate_limit_error", "rate_limit_exceeded", "Rate limit reached. Please try again later.", "", t.clientEvent))
		rt.sendRateLimits(x.arr.limits)
		return
	}
	f, err := parseFaults(x.r.Header)
	if err != nil {
		t.release()
		x.status = http.StatusBadRequest
		rt.send(realtimeError("invalid_request_error", "invalid_value", err.Error(), "response.metadata", t.clientEvent))
		return
	}
	x.faults = f
	slowdown, done := rt.p.enterService(x.now)
	defer done()
	if !x.wait(time.Duration(float64(f.latencyOr(rt.p.cfg.Latency)) * slowdown)) {
		return
	}
	if f.status != 0 {
		t.release()
		x.status = f.status
		typ, code := openAIErrorKind(f.status)
		rt.send(realtimeError(typ, deref(code), fmt.Sprintf("Injected fault: status %d", f.status), "", t.clientEvent))
		return
	}
	t.play()
}

// play sends the response's events; a response.cancel midway ends it with
// response.done cancelled, its usage the output sent.
func (t *rtTurn) play() {
	rt, x := t.rt, t.x
	x.status = http.StatusOK
	status, details := "completed", map[string]any(nil)
	if t.rep.truncated {
		status, details = "incomplete", map[string]any{"type": "incomplete", "reason": "max_output_tokens"}
	}
	counter := &deltaCounter{rtSink: x.sink.(rtSink), t: t}
	x.play(rtPlan(t.done(t.rep, status, details), t.itemID, t.prev, t.rep, t.audio), counter)
	var out reply
	switch {
	case x.outcome == streamCompleted:
	case t.act.ctx.Err() != nil && rt.ctx.Err() == nil: // response.cancel
		out = t.rep
		out.chunks = t.rep.chunks[:counter.deltas]
		out.text = strings.Join(out.chunks, "")
		out.words = strings.Fields(out.text)
		t.addOutput(out)
		rt.send(map[string]any{"type": "response.done",
			"response": t.done(out, "cancelled", map[string]any{"type": "cancelled", "reason": "client_cancelled"})})
		x.outcome = streamCompleted
	default:
		return // cut, or the session ended
	}
	rt.sendRateLimits(x.arr.limits)
}

// done is the response ended with status and details, its usage for the
// output rep (also the exchange's, for the log).
func (t *rtTurn) done(rep reply, status string, details map[string]any) rtResponse {
	outText, outAudio := t.outTokens(rep)
	u := newRTUsage(t.inText, t.inAudio, t.cachedText, t.cachedAudio, outText, outAudio)
	resp := t.resp
	resp.Status, resp.StatusDetails, resp.Usage = status, details, &u
	resp.Output = []any{rtItem(t.itemID, statusOfItem(status), rep.text, t.audio)}
	t.x.usage = u.usage()
	return resp
}

// outTokens are the text and audio tokens of the output rep.
func (t *rtTurn) outTokens(rep reply) (text, audio int) {
	if t.audio {
		return len(rep.words), outputAudioPerWord * len(rep.words)
	}
	return len(rep.words), 0
}

// addOutput adds the response's output rep to the conversation, and its
// input to the prompt cache, and ends it as the session's active
// response: the next response.create, sent once response.done is read,
// sees the conversation with it.
func (t *rtTurn) addOutput(rep reply) {
	outText, outAudio := t.outTokens(rep)
	rt := t.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.active == t.act {
		rt.active = nil
	}
	rt.items++
	rt.lastItem = t.itemID
	rt.text += outText
	rt.audio += outAudio
	rt.cachedText, rt.cachedAudio = t.inText, t.inAudio
}

func statusOfItem(status string) string {
	if status == "completed" {
		return "completed"
	}
	return "incomplete"
}

// release ends the response as the session's active one, if it still is.
func (t *rtTurn) release() {
	rt := t.rt
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.active == t.act {
		rt.active = nil
	}
}

// sendRateLimits sends rate_limits.updated for the buckets lim, now.
func (rt *realtimeSession) sendRateLimits(lim *limits) {
	if lim == nil {
		return
	}
	req, tok := rt.p.limitsNow(lim, rt.p.cfg.Now())
	rt.send(rateLimitsEvent(req, tok))
}

func intOr(v any) int {
	n, _ := v.(int)
	return n
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// rtSink plays a response onto its session: each event stamped with an
// event_id; its pauses and stalls end when the response is cancelled.
type rtSink struct {
	rt  *realtimeSession
	ctx context.Context // the response's
}

func (k rtSink) send(e sseEvent) error {
	if err := k.ctx.Err(); err != nil {
		return err
	}
	ev, ok := e.data.(map[string]any)
	if !ok {
		return fmt.Errorf("fakeprovider: realtime event %q is not an object", e.name)
	}
	return k.rt.sendErr(ev)
}

func (k rtSink) pause(d time.Duration) error { return pause(k.ctx, d) }

func (k rtSink) stall() { <-k.ctx.Done() }

func (k rtSink) abort() { socketSink{s: k.rt.socketConn}.abort() }

// deltaCounter counts the content chunks sent, for a cancelled
// response's usage, and adds the whole output to the conversation just
// before response.done goes out.
type deltaCounter struct {
	rtSink
	t      *rtTurn
	deltas int
}

func (d *deltaCounter) send(e sseEvent) error {
	if e.name == "response.done" {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		d.t.addOutput(d.t.rep)
	}
	err := d.rtSink.send(e)
	if err == nil && strings.HasSuffix(e.name, ".delta") && e.name != "response.output_audio.delta" {
		d.deltas++
	}
	return err
}
