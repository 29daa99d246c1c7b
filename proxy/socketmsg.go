package proxy

import (
	"context"
	"errors"
	"io"

	"github.com/coder/websocket"
)

// socketMessage is one data message of a socket, held whole in memory
// and charged to the body memory budget until release: a client's as a
// request body (body), an upstream's as an answer read ahead.
type socketMessage struct {
	typ websocket.MessageType
	// body holds the bytes; for an upstream message, ahead says they are
	// charged to the answers' share of the budget.
	body  *body
	ahead bool
}

// data is the message's bytes.
func (m *socketMessage) data() []byte { return m.body.buf }

// release gives the message's bytes back to the budget; later calls do
// nothing.
func (m *socketMessage) release() {
	if m.ahead {
		m.body.budget.giveAhead(m.body.held)
		m.body.held = 0
		return
	}
	m.body.release()
}

// errSocketMemory says a client's message did not fit the body memory
// budget: it was read and thrown away, and the socket goes on.
var errSocketMemory = errors.New("proxy: socket message exceeds the body memory budget")

// readMessage reads the next data message of c whole (c's read limit,
// server.max_socket_message_bytes, bounds it after decompression: past
// it the read fails with websocket.ErrMessageTooBig and c is closed
// 1009). Its buffer grows as bytes arrive, each growth charged to budget
// first — as a request body of its class (interactive), or, ahead, as an
// answer read ahead. A client's message the budget cannot hold is read
// to its end and dropped (errSocketMemory); an upstream's fails the same
// way, and the socket must end.
func readMessage(ctx context.Context, c *websocket.Conn, budget *memBudget, limit int64, interactive, ahead bool) (*socketMessage, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return nil, err
	}
	take := func(n int64) bool { return budget.take(n, interactive) }
	if ahead {
		take = func(n int64) bool { return budget.takeAhead(n, interactive) }
	}
	m := &socketMessage{typ: typ, body: &body{budget: budget}, ahead: ahead}
	b := m.body
	for {
		if len(b.buf) == cap(b.buf) && int64(cap(b.buf)) <= limit {
			// Room for one byte past the limit, which the reader refuses.
			next := min(max(2*int64(cap(b.buf)), firstChunk), limit+1)
			if !take(next - int64(cap(b.buf))) {
				m.release()
				if _, err := io.Copy(io.Discard, r); err != nil {
					return nil, err
				}
				return nil, errSocketMemory
			}
			b.held += next - int64(cap(b.buf))
			buf := make([]byte, len(b.buf), next)
			copy(buf, b.buf)
			b.buf = buf
		}
		n, err := r.Read(b.buf[len(b.buf):cap(b.buf)])
		b.buf = b.buf[:len(b.buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			return m, nil
		case err != nil:
			m.release()
			return nil, err
		}
	}
}
