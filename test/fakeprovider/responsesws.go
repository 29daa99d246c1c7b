package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// The Responses API over WebSocket, as OpenAI's WebSocket mode: each
// client response.create is answered as POST /v1/responses with stream
// true would be (the same exchange: rate limit, faults, events, usage,
// log), its events sent as text messages.

// Bounds of one Responses socket, as OpenAI's WebSocket mode guide gives
// them.
const (
	// maxSocketInFlight is the most responses in flight (queued or
	// running) on one connection.
	maxSocketInFlight = 16
	// maxSocketLanes is the most distinct named lanes (stream_id) of one
	// connection.
	maxSocketLanes = 32
	// maxStreamIDBytes bounds a stream_id.
	maxStreamIDBytes = 256
)

// responseCreate is one client response.create event, decoded.
type responseCreate struct {
	// body is the POST /v1/responses body the event stands for: its
	// fields less type, stream_id and stream, plus "stream": true,
	// compact, keys sorted, HTML characters unescaped.
	body []byte
	// streamID is the lane; "" for the connection's own.
	streamID string
	// knobs are the metadata entries named x-fake-*: fault knobs for this
	// turn, as their headers.
	knobs map[string]string
}

// eventError is a client event the provider refuses with an error event.
type eventError struct {
	code, message, param string
}

func (e *eventError) Error() string { return e.message }

// parseResponseCreate decodes one client message of a Responses socket.
func parseResponseCreate(msg []byte) (responseCreate, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(msg, &fields); err != nil || fields == nil {
		return responseCreate{}, &eventError{code: "invalid_json", message: "The message is not a JSON object: " + errText(err)}
	}
	var typ string
	if json.Unmarshal(fields["type"], &typ) != nil || typ != "response.create" {
		return responseCreate{}, &eventError{code: "invalid_event", param: "type",
			message: fmt.Sprintf("Unsupported event type %s; a Responses WebSocket takes response.create.", truncate(fields["type"], 64))}
	}
	var rc responseCreate
	if raw, ok := fields["stream_id"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &rc.streamID) != nil || rc.streamID == "" || len(rc.streamID) > maxStreamIDBytes {
			return responseCreate{}, &eventError{code: "invalid_value", param: "stream_id",
				message: fmt.Sprintf("stream_id must be a string of 1 to %d bytes.", maxStreamIDBytes)}
		}
	}
	var background bool
	if json.Unmarshal(fields["background"], &background) == nil && background {
		return responseCreate{}, &eventError{code: "unsupported_parameter", param: "background",
			message: "background is not supported in WebSocket mode."}
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(fields["metadata"], &meta) == nil {
		for k, raw := range meta {
			var v string
			if strings.HasPrefix(strings.ToLower(k), "x-fake-") && json.Unmarshal(raw, &v) == nil {
				if rc.knobs == nil {
					rc.knobs = make(map[string]string)
				}
				rc.knobs[k] = v
			}
		}
	}
	delete(fields, "type")
	delete(fields, "stream_id")
	fields["stream"] = json.RawMessage("true")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil { // fields decoded from JSON encode again
		return responseCreate{}, &eventError{code: "invalid_json", message: "The message could not be re-encoded: " + err.Error()}
	}
	rc.body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return rc, nil
}

func errText(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// truncate quotes raw, cut to n bytes.
func truncate(raw json.RawMessage, n int) string {
	if len(raw) == 0 {
		return "(none)"
	}
	if len(raw) > n {
		return string(raw[:n]) + "…"
	}
	return string(raw)
}

// responsesSocket is one Responses WebSocket: its lanes, each a FIFO of
// turns run by a goroutine of its own.
type responsesSocket struct {
	*socketConn
	lanesWG sync.WaitGroup

	mu       sync.Mutex
	lanes    map[string]chan responseCreate
	inFlight int
}

// serveResponsesSocket accepts a Responses WebSocket and serves it until
// it ends.
func (p *Provider) serveResponsesSocket(w http.ResponseWriter, r *http.Request) {
	s, ok := p.acceptSocket(w, r, SocketResponses, nil)
	if !ok {
		return
	}
	rs := &responsesSocket{socketConn: s, lanes: make(map[string]chan responseCreate)}
	rs.run(rs.handle, rs.lanesWG.Wait)
}

// handle takes one client message: a response.create is queued on its
// lane; anything else is answered with an error event.
func (rs *responsesSocket) handle(typ websocket.MessageType, msg []byte) {
	if typ != websocket.MessageText {
		rs.refuse("", &eventError{code: "invalid_event", message: "Binary messages are not supported; send JSON text."})
		return
	}
	rc, err := parseResponseCreate(msg)
	if ee, ok := errors.AsType[*eventError](err); ok {
		rs.refuse(rc.streamID, ee)
		return
	}
	if e := rs.enqueue(rc); e != nil {
		rs.refuse(rc.streamID, e)
	}
}

// enqueue queues rc on its lane, starting the lane when it is new, or
// says why it cannot.
func (rs *responsesSocket) enqueue(rc responseCreate) *eventError {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.inFlight >= maxSocketInFlight {
		return &eventError{code: "websocket_stream_limit_reached",
			message: fmt.Sprintf("At most %d responses may be in flight on one connection.", maxSocketInFlight)}
	}
	lane, ok := rs.lanes[rc.streamID]
	if !ok {
		if rc.streamID != "" && len(rs.lanes)-rs.unnamed() >= maxSocketLanes {
			return &eventError{code: "websocket_stream_limit_reached", param: "stream_id",
				message: fmt.Sprintf("At most %d stream_id lanes may be used on one connection.", maxSocketLanes)}
		}
		lane = make(chan responseCreate, maxSocketInFlight)
		rs.lanes[rc.streamID] = lane
		rs.lanesWG.Go(func() { rs.runLane(lane) })
	}
	rs.inFlight++
	lane <- rc // never blocks: at most maxSocketInFlight are queued in all
	return nil
}

// unnamed is 1 when the connection's own lane exists (rs.mu held).
func (rs *responsesSocket) unnamed() int {
	if _, ok := rs.lanes[""]; ok {
		return 1
	}
	return 0
}

// refuse answers a client event that is no turn with an error event (400).
func (rs *responsesSocket) refuse(streamID string, e *eventError) {
	rs.p.count(func(st *Stats) *int { return &st.SocketErrors })
	ev := responsesError(http.StatusBadRequest, "invalid_request_error", e.code, e.message, e.param)
	_ = socketSink{s: rs.socketConn, streamID: streamID}.send(sseEvent{data: ev})
}

// runLane runs lane's turns in order until the socket ends.
func (rs *responsesSocket) runLane(lane chan responseCreate) {
	for {
		select {
		case <-rs.ctx.Done():
			return
		case rc := <-lane:
			rs.turn(rc)
			rs.mu.Lock()
			rs.inFlight--
			rs.mu.Unlock()
		}
	}
}

// turn answers one response.create as its POST /v1/responses would be
// answered, onto the socket.
func (rs *responsesSocket) turn(rc responseCreate) {
	r, err := http.NewRequestWithContext(rs.ctx, http.MethodPost, rs.path, bytes.NewReader(rc.body))
	if err != nil { // the path came from an accepted request
		return
	}
	r.Header = rs.header.Clone()
	for k, v := range rc.knobs {
		r.Header.Set(k, v)
	}
	x := &exchange{p: rs.p, w: &turnWriter{header: make(http.Header)}, r: r, body: rc.body, now: rs.p.cfg.Now(),
		api: apiFor(rs.path), sink: socketSink{s: rs.socketConn, streamID: rc.streamID},
		socket: SocketResponses, streamID: rc.streamID}
	x.serve(nil)
}
