package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The WebSockets: what they share. A Responses socket (responsesws.go)
// and a Realtime session (realtime.go) are each accepted here, bounded in
// message size (Config.WSMaxMessageBytes) and age (Config.WSMaxAge), and
// write JSON text messages; ping and pong are the library's.

// serveSocket serves r when it is a WebSocket upgrade on a socket path,
// and reports whether it did.
func (p *Provider) serveSocket(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet || !headerHasToken(r.Header, "Upgrade", "websocket") {
		return false
	}
	switch r.URL.Path {
	case "/v1/responses", "/openai/v1/responses", "/openai/responses":
		p.serveResponsesSocket(w, r)
	case "/v1/realtime", "/openai/realtime", "/openai/v1/realtime":
		p.serveRealtime(w, r)
	default:
		return false
	}
	return true
}

// headerHasToken reports whether a comma-separated header of h names
// token, case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// socketConn is one accepted WebSocket.
type socketConn struct {
	p      *Provider
	kind   SocketKind
	conn   *websocket.Conn
	ctx    context.Context // done when the socket ends
	cancel context.CancelFunc
	path   string
	header http.Header // the upgrade's
	opened time.Time   // by Config.Now
	// expireOnce sends the age limit's error and closes, once.
	expireOnce sync.Once
	// done is closed when the socket has ended and its goroutines with it.
	done chan struct{}
}

// acceptSocket upgrades r to a WebSocket of kind, negotiating one of
// subprotocols when the client offers it, and counts it open; ok is false
// when the upgrade failed (Accept has answered).
func (p *Provider) acceptSocket(w http.ResponseWriter, r *http.Request, kind SocketKind, subprotocols []string) (*socketConn, bool) {
	p.socketUp() // before the handshake: a client that dialled may wait for it to close
	// Its age counts from before the handshake too: a client's dial returns
	// as soon as Accept has answered, and a test may move Config.Now at once
	// (read after, the age started from the moved clock: TestSocketMaxAge
	// waited for ever on a loaded machine).
	opened := p.cfg.Now()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       subprotocols,
		InsecureSkipVerify: true, // a test double: any Origin
	})
	if err != nil {
		p.socketDown(nil)
		return nil, false
	}
	conn.SetReadLimit(p.cfg.WSMaxMessageBytes)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	s := &socketConn{p: p, kind: kind, conn: conn, ctx: ctx, cancel: cancel, path: r.URL.Path,
		header: r.Header.Clone(), opened: opened, done: make(chan struct{})}
	p.countSocket(kind, 1)
	p.mu.Lock()
	p.sockets[s] = struct{}{}
	closing := p.socketsClosing > 0
	p.mu.Unlock()
	if closing { // CloseSockets is under way: this one goes too
		_ = conn.Close(websocket.StatusGoingAway, "server going away")
		s.cancel()
	}
	return s, true
}

// socketUp counts a socket coming up (WaitSocketsClosed waits for it).
func (p *Provider) socketUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.socketsLive == 0 {
		p.socketsGone = make(chan struct{})
	}
	p.socketsLive++
}

// socketDown counts a socket gone: s, or one whose upgrade failed (nil).
func (p *Provider) socketDown(s *socketConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sockets, s)
	if p.socketsLive--; p.socketsLive == 0 {
		close(p.socketsGone)
	}
}

// WaitSocketsClosed waits until no WebSocket is open — every one has
// ended, its turns with it, and is counted closed in Stats — or until ctx
// ends, and returns ctx's error then.
func (p *Provider) WaitSocketsClosed(ctx context.Context) error {
	p.mu.Lock()
	gone := p.socketsGone
	p.mu.Unlock()
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fakeprovider: wait for sockets to close: %w", context.Cause(ctx))
	}
}

// CloseSockets closes every open WebSocket, and any whose upgrade is
// under way, with 1001 (going away), as a provider closes them when it
// restarts, and returns once they and their turns and responses have
// ended. A turn in progress is cut.
func (p *Provider) CloseSockets() {
	p.mu.Lock()
	p.socketsClosing++
	open := make([]*socketConn, 0, len(p.sockets))
	for s := range p.sockets {
		open = append(open, s)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.socketsClosing--
		p.mu.Unlock()
	}()
	var wg sync.WaitGroup
	for _, s := range open {
		wg.Go(func() {
			// Close before cancelling: a cancelled read would drop the
			// connection before the close frame is out.
			_ = s.conn.Close(websocket.StatusGoingAway, "server going away")
			s.cancel()
			<-s.done
		})
	}
	wg.Wait()
	_ = p.WaitSocketsClosed(context.Background()) // those accepted meanwhile close themselves
}

// countSocket counts a socket of kind opened (+1) or closed (-1).
func (p *Provider) countSocket(kind SocketKind, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch kind {
	case SocketResponses:
		p.stats.ResponsesSocketsOpen += d
		p.stats.ResponsesSockets += max(d, 0)
	case SocketRealtime:
		p.stats.RealtimeSessionsOpen += d
		p.stats.RealtimeSessions += max(d, 0)
	}
}

// count adds one to the Stats field f picks.
func (p *Provider) count(f func(*Stats) *int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*f(&p.stats)++
}

// run reads client messages and hands each to handle until the socket
// ends: the client closes or goes away, a message is too big (1009), or
// the socket reaches its age (Config.WSMaxAge: expire). It then ends
// the socket, waits for wait (the socket's goroutines) and counts it
// closed.
func (s *socketConn) run(handle func(typ websocket.MessageType, msg []byte), wait func()) {
	var watch sync.WaitGroup
	defer func() {
		s.cancel()
		_ = s.conn.CloseNow()
		wait()
		watch.Wait()
		s.p.countSocket(s.kind, -1)
		close(s.done)
		s.p.socketDown(s)
	}()
	watch.Go(func() {
		t := time.NewTimer(s.p.cfg.WSMaxAge)
		defer t.Stop()
		select {
		case <-t.C:
			s.expire()
		case <-s.ctx.Done():
		}
	})
	for {
		typ, msg, err := s.conn.Read(s.ctx)
		if err != nil {
			return
		}
		if s.p.cfg.Now().Sub(s.opened) >= s.p.cfg.WSMaxAge {
			s.expire()
			return
		}
		handle(typ, msg)
	}
}

// expire ends a socket at its age limit as OpenAI does: an error event
// naming the limit, then a normal close.
func (s *socketConn) expire() {
	s.expireOnce.Do(func() {
		s.p.count(func(st *Stats) *int { return &st.SocketsMaxAge })
		minutes := int(s.p.cfg.WSMaxAge.Minutes())
		if s.kind == SocketRealtime {
			_ = s.write(realtimeError("invalid_request_error", "session_expired",
				fmt.Sprintf("Your session hit the maximum duration of %d minutes.", minutes), "", ""))
		} else {
			_ = s.write(responsesError(http.StatusBadRequest, "invalid_request_error", "websocket_connection_limit_reached",
				fmt.Sprintf("Responses websocket connection limit reached (%d minutes). Create a new websocket connection to continue.", minutes), ""))
		}
		_ = s.conn.Close(websocket.StatusNormalClosure, "connection limit reached")
		s.cancel()
	})
}

// write sends v as one JSON text message.
func (s *socketConn) write(v any) error {
	b, err := marshalEvent(v, "")
	if err != nil {
		return err
	}
	return s.conn.Write(s.ctx, websocket.MessageText, b)
}

// marshalEvent encodes an event as JSON, with "stream_id" first when
// streamID is not empty.
func marshalEvent(v any, streamID string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: encode event: %w", err)
	}
	if streamID == "" {
		return b, nil
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, errors.New("fakeprovider: an event with a stream_id is not a JSON object")
	}
	id, _ := json.Marshal(streamID) // a string always encodes
	lane := append(append([]byte(`{"stream_id":`), id...), ',')
	if bytes.Equal(b, []byte("{}")) {
		return append(lane[:len(lane)-1], '}'), nil
	}
	return append(lane, b[1:]...), nil
}

// socketSink plays a stream onto a socket: each event one text message,
// its stream_id echoed.
type socketSink struct {
	s        *socketConn
	streamID string
}

var _ eventSink = socketSink{}

func (k socketSink) send(e sseEvent) error {
	b, err := marshalEvent(e.data, k.streamID)
	if err != nil {
		return err
	}
	return k.s.conn.Write(k.s.ctx, websocket.MessageText, b)
}

func (k socketSink) pause(d time.Duration) error { return pause(k.s.ctx, d) }

func (k socketSink) stall() { <-k.s.ctx.Done() }

// abort closes the socket without a close frame: the client reads an
// abnormal closure (1006).
func (k socketSink) abort() {
	_ = k.s.conn.CloseNow()
	k.s.cancel()
}

// responsesError is the error event of a Responses socket, as OpenAI sends
// it: the HTTP status it stands for and the error object of an HTTP error
// body.
func responsesError(status int, typ, code, msg, param string) map[string]any {
	detail := openAIErrorDetail{Message: msg, Type: typ}
	if code != "" {
		detail.Code = &code
	}
	if param != "" {
		detail.Param = &param
	}
	return map[string]any{"type": "error", "status": status, "error": detail}
}

// sendErrorEvent answers a turn of a socket that failed with status and
// the HTTP error body body: an error event carrying the status, the
// body's error object and the headers the HTTP answer would have had
// (rate limits, retry-after) — in error.headers, where OpenAI's API
// reference puts them, and at the top, where Codex reads them.
func (x *exchange) sendErrorEvent(status int, body []byte) {
	var e struct {
		Error map[string]any `json:"error"`
	}
	_ = json.Unmarshal(body, &e) // our own error bodies: always an error object
	headers := make(map[string]string)
	for k, v := range x.w.Header() {
		if len(v) > 0 {
			headers[strings.ToLower(k)] = v[0]
		}
	}
	if e.Error == nil {
		e.Error = map[string]any{}
	}
	e.Error["headers"] = headers
	_ = x.sink.send(sseEvent{name: "error", data: map[string]any{
		"type": "error", "status": status, "error": e.Error, "headers": headers,
	}})
}

// turnWriter is the http.ResponseWriter of a socket's turn: it keeps the
// headers an HTTP answer would carry (sendErrorEvent reads them); the
// events go to the exchange's sink, never to it.
type turnWriter struct{ header http.Header }

func (t *turnWriter) Header() http.Header         { return t.header }
func (t *turnWriter) Write(b []byte) (int, error) { return len(b), nil }
func (t *turnWriter) WriteHeader(int)             {}
