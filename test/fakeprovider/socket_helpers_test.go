package fakeprovider_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// dial opens a WebSocket to path on srv with hdr; it is closed when the
// test ends.
func dial(t *testing.T, srv *httptest.Server, path string, hdr http.Header) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + path
	c, resp, err := websocket.Dial(t.Context(), u, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// wsEvent is one server event: its raw text and its type.
type wsEvent struct {
	raw  string
	typ  string
	data map[string]any
}

// readEvent reads the next text message from c.
func readEvent(t *testing.T, c *websocket.Conn) wsEvent {
	t.Helper()
	ev, err := tryReadEvent(t, c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return ev
}

func tryReadEvent(t *testing.T, c *websocket.Conn) (wsEvent, error) {
	t.Helper()
	typ, b, err := c.Read(t.Context())
	if err != nil {
		return wsEvent{}, err
	}
	if typ != websocket.MessageText {
		t.Fatalf("message type %v, want text", typ)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("event %s: %v", b, err)
	}
	s, _ := m["type"].(string)
	return wsEvent{raw: string(b), typ: s, data: m}, nil
}

// readUntil reads events until one of type last (included).
func readUntil(t *testing.T, c *websocket.Conn, last ...string) []wsEvent {
	t.Helper()
	var out []wsEvent
	for {
		ev := readEvent(t, c)
		out = append(out, ev)
		for _, l := range last {
			if ev.typ == l {
				return out
			}
		}
		if len(out) > 1000 {
			t.Fatalf("no %v in 1000 events", last)
		}
	}
}

// send writes v as a JSON text message.
func sendEvent(t *testing.T, c *websocket.Conn, v string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(v)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// closeStatus reads until the socket ends and returns its close status
// (-1 for none: cut without a close frame).
func closeStatus(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	for {
		_, _, err := c.Read(t.Context())
		if err != nil {
			if ce, ok := errors.AsType[websocket.CloseError](err); ok {
				return ce.Code
			}
			return -1
		}
	}
}

// num reads a number at path (dot-separated keys) of m.
func num(t *testing.T, m map[string]any, path string) int {
	t.Helper()
	var v any = m
	for k := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", path, v)
		}
		v = obj[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s = %v, not a number", path, v)
	}
	return int(f)
}

// str reads a string at path of m ("" when absent).
func str(m map[string]any, path string) string {
	var v any = m
	for k := range strings.SplitSeq(path, ".") {
		obj, _ := v.(map[string]any)
		v = obj[k]
	}
	s, _ := v.(string)
	return s
}
