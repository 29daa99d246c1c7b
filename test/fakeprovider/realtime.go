package fakeprovider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// A Realtime session: session.created on connect, then the client events
// below, each response a request of its own (rate-limited, logged, its
// usage in response.done) followed by rate_limits.updated.

// audioBytesPerToken is the PCM16 audio at 24 kHz (48,000 bytes a
// second) one input or output audio token stands for: 100 ms, as OpenAI
// counts audio.
const audioBytesPerToken = 4800

// outputAudioPerWord is the audio tokens a spoken response adds per word
// of its transcript.
const outputAudioPerWord = 4

// realtimeSession is one Realtime WebSocket.
type realtimeSession struct {
	*socketConn
	responses sync.WaitGroup
	tag       string // 8 hex digits of the session id, in the ids of its items and responses

	mu       sync.Mutex
	session  rtSession
	events   uint64 // server events sent, for event ids
	items    int    // conversation items (user and assistant)
	lastItem string // the last item's id
	// text and audio are the conversation's tokens so far; cachedText and
	// cachedAudio the input of the last response (the prompt cache holds
	// it).
	text, audio, cachedText, cachedAudio int
	buffered                             int // input audio bytes appended, not committed
	active                               *activeResponse
	seq                                  int // responses created
}

// activeResponse is the response in progress; cancel stops it
// (response.cancel).
type activeResponse struct {
	id     string
	ctx    context.Context
	cancel context.CancelFunc
}

// serveRealtime accepts a Realtime session and serves it until it ends.
func (p *Provider) serveRealtime(w http.ResponseWriter, r *http.Request) {
	s, ok := p.acceptSocket(w, r, SocketRealtime, []string{"realtime"})
	if !ok {
		return
	}
	q := r.URL.Query()
	model := q.Get("model")
	if d := q.Get("deployment"); d != "" {
		model = d
	}
	id := bodyID("sess_", []byte(fmt.Sprintf("%s %d", r.URL.RawQuery, s.opened.UnixNano())))
	rt := &realtimeSession{socketConn: s, tag: id[len("sess_"):][:8],
		session: newRTSession(id, modelOr(model), s.opened.Add(p.cfg.WSMaxAge).Unix())}
	rt.send(map[string]any{"type": "session.created", "session": rt.sessionCopy()})
	rt.run(rt.handle, rt.responses.Wait)
}

// send writes ev (a map of one event) stamped with the next event_id.
func (rt *realtimeSession) send(ev map[string]any) {
	_ = rt.sendErr(ev)
}

func (rt *realtimeSession) sendErr(ev map[string]any) error {
	rt.mu.Lock()
	rt.events++
	n := rt.events
	rt.mu.Unlock()
	out := make(map[string]any, len(ev)+1)
	for k, v := range ev {
		out[k] = v
	}
	out["event_id"] = eventID(rt.tag, n)
	return rt.write(out)
}

func (rt *realtimeSession) sessionCopy() rtSession {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.session
}

// refuse answers a client event with an error event.
func (rt *realtimeSession) refuse(ev realtimeClientEvent, e *eventError) {
	rt.p.count(func(st *Stats) *int { return &st.SocketErrors })
	rt.send(realtimeError("invalid_request_error", e.code, e.message, e.param, ev.EventID))
}

// handle takes one client event.
func (rt *realtimeSession) handle(typ websocket.MessageType, msg []byte) {
	if typ != websocket.MessageText {
		rt.refuse(realtimeClientEvent{}, &eventError{code: "invalid_event", message: "Binary messages are not supported; send JSON text."})
		return
	}
	ev, err := parseRealtimeEvent(msg)
	if e, ok := errors.AsType[*eventError](err); ok {
		rt.refuse(ev, e)
		return
	}
	switch ev.Type {
	case "session.update":
		rt.mu.Lock()
		err = rt.session.apply(ev.Session)
		rt.mu.Unlock()
		if err == nil {
			rt.send(map[string]any{"type": "session.updated", "session": rt.sessionCopy()})
		}
	case "conversation.item.create":
		err = rt.createItem(ev.Item)
	case "input_audio_buffer.append":
		err = rt.appendAudio(ev.Audio)
	case "input_audio_buffer.commit":
		err = rt.commitAudio()
	case "input_audio_buffer.clear":
		rt.mu.Lock()
		rt.buffered = 0
		rt.mu.Unlock()
		rt.send(map[string]any{"type": "input_audio_buffer.cleared"})
	case "response.create":
		err = rt.startResponse(ev, false)
	case "response.cancel":
		err = rt.cancelResponse()
	default:
		err = &eventError{code: "invalid_event", param: "type", message: fmt.Sprintf("Unsupported event type %q.", truncate(json.RawMessage(ev.Type), 64))}
	}
	if e, ok := errors.AsType[*eventError](err); ok {
		rt.refuse(ev, e)
	}
}

// createItem adds a client item to the conversation: its JSON's bytes
// over four are its text tokens.
func (rt *realtimeSession) createItem(raw json.RawMessage) error {
	var item map[string]any
	if err := json.Unmarshal(raw, &item); err != nil || item == nil {
		return &eventError{code: "invalid_value", param: "item", message: "item must be an object."}
	}
	rt.mu.Lock()
	prev := rt.lastItem
	id, _ := item["id"].(string)
	if id == "" {
		id = fmt.Sprintf("item_%s_%d", rt.tag, rt.items+1)
	}
	item["id"], item["object"], item["status"] = id, "realtime.item", "completed"
	rt.items++
	rt.lastItem = id
	rt.text += promptTokens(raw)
	rt.mu.Unlock()
	rt.send(map[string]any{"type": "conversation.item.created", "previous_item_id": nullable(prev), "item": item})
	return nil
}

// appendAudio adds base64 audio to the input buffer.
func (rt *realtimeSession) appendAudio(b64 string) error {
	n, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return &eventError{code: "invalid_value", param: "audio", message: "audio is not base64."}
	}
	rt.mu.Lock()
	rt.buffered += len(n)
	rt.mu.Unlock()
	return nil
}

// commitAudio makes the input buffer a user item; with server VAD the
// server then creates a response itself, as it does when it hears the
// caller stop.
func (rt *realtimeSession) commitAudio() error {
	rt.mu.Lock()
	if rt.buffered == 0 {
		rt.mu.Unlock()
		return &eventError{code: "input_audio_buffer_commit_empty", message: "Error committing input audio buffer: buffer is empty."}
	}
	prev := rt.lastItem
	rt.items++
	id := fmt.Sprintf("item_%s_%d", rt.tag, rt.items)
	rt.lastItem = id
	rt.audio += (rt.buffered + audioBytesPerToken - 1) / audioBytesPerToken
	rt.buffered = 0
	vad := rt.session.vad()
	rt.mu.Unlock()
	item := map[string]any{"id": id, "object": "realtime.item", "type": "message", "status": "completed", "role": "user",
		"content": []any{map[string]any{"type": "input_audio", "transcript": nil}}}
	rt.send(map[string]any{"type": "input_audio_buffer.committed", "previous_item_id": nullable(prev), "item_id": id})
	rt.send(map[string]any{"type": "conversation.item.created", "previous_item_id": nullable(prev), "item": item})
	if vad {
		_ = rt.startResponse(realtimeClientEvent{}, true) // an active response keeps the floor
	}
	return nil
}

// cancelResponse stops the response in progress.
func (rt *realtimeSession) cancelResponse() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.active == nil {
		return &eventError{code: "response_cancel_not_active", message: "Cancellation failed: no active response found."}
	}
	rt.active.cancel()
	return nil
}
