// Package h2craw is a raw HTTP/2 client over cleartext (h2c with prior
// knowledge) for tests of clients that misbehave: one that announces a
// flow-control window of zero (SETTINGS_INITIAL_WINDOW_SIZE=0) and never
// widens it takes its answers' headers but not a byte of their bodies, as
// a client that never reads does. It records, per stream, the status, the
// body bytes that came and a reset.
package h2craw

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is one client connection. Post may be called from any goroutine.
type Conn struct {
	c     net.Conn
	fr    *http2.Framer
	reads bool
	done  chan struct{} // closed when the read loop returns

	wmu  sync.Mutex // the framer's writes, the encoder, next
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32

	mu      sync.Mutex
	streams map[uint32]*Stream
	err     error // why the read loop ended
}

// Stream is what came of one request so far.
type Stream struct {
	// Status is the answer's status; 0 before its headers.
	Status int
	// Received is how many body bytes came.
	Received int
	// Reset is the code of the server's RST_STREAM; Ended says the body
	// ended (END_STREAM).
	Reset    http2.ErrCode
	WasReset bool
	Ended    bool
}

// Dial opens an h2c connection to addr. A client that reads (reads true)
// widens both windows by what each DATA frame carries; one that does not
// announces a stream window of zero and never widens it.
func Dial(addr string, reads bool) (*Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	cn := &Conn{c: c, fr: http2.NewFramer(c, c), reads: reads, done: make(chan struct{}), next: 1, streams: map[uint32]*Stream{}}
	cn.enc = hpack.NewEncoder(&cn.hbuf)
	cn.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var settings []http2.Setting
	if !reads {
		settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := cn.fr.WriteSettings(settings...); err != nil {
		_ = c.Close()
		return nil, err
	}
	go cn.readLoop()
	return cn, nil
}

// Post sends a POST of body to path with header (":authority" is addr's
// host) on a new stream, and returns its id.
func (cn *Conn) Post(authority, path string, header map[string]string, body []byte) (uint32, error) {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	id := cn.next
	cn.next += 2
	cn.mu.Lock()
	cn.streams[id] = &Stream{}
	cn.mu.Unlock()
	cn.hbuf.Reset()
	fields := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: authority}, {Name: ":path", Value: path},
		{Name: "content-length", Value: strconv.Itoa(len(body))}}
	for k, v := range header {
		fields = append(fields, hpack.HeaderField{Name: strings.ToLower(k), Value: v})
	}
	for _, f := range fields {
		if err := cn.enc.WriteField(f); err != nil {
			return 0, err
		}
	}
	if err := cn.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cn.hbuf.Bytes(),
		EndHeaders: true, EndStream: len(body) == 0}); err != nil {
		return 0, err
	}
	if len(body) > 0 {
		if err := cn.fr.WriteData(id, true, body); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// Stream returns what came of stream id so far.
func (cn *Conn) Stream(id uint32) Stream {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if s := cn.streams[id]; s != nil {
		return *s
	}
	return Stream{}
}

// Err is why the connection's read loop ended; nil while it runs.
func (cn *Conn) Err() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

// Close closes the connection and waits for its read loop.
func (cn *Conn) Close() error {
	err := cn.c.Close()
	<-cn.done
	return err
}

// readLoop reads frames until the connection fails: it acknowledges
// SETTINGS and answers PINGs, records each stream's headers, body bytes
// and reset, and widens the windows only when the client reads.
func (cn *Conn) readLoop() {
	defer close(cn.done)
	for {
		f, err := cn.fr.ReadFrame()
		if err != nil {
			cn.mu.Lock()
			cn.err = err
			cn.mu.Unlock()
			return
		}
		if err := cn.handle(f); err != nil {
			cn.mu.Lock()
			cn.err = err
			cn.mu.Unlock()
			_ = cn.c.Close()
			return
		}
	}
}

// handle records one frame and answers it when the protocol asks.
func (cn *Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			return cn.write(func() error { return cn.fr.WriteSettingsAck() })
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			return cn.write(func() error { return cn.fr.WritePing(true, f.Data) })
		}
	case *http2.MetaHeadersFrame:
		status, _ := strconv.Atoi(f.PseudoValue("status"))
		cn.update(f.StreamID, func(s *Stream) {
			if status >= 200 {
				s.Status = status
			}
			s.Ended = s.Ended || f.StreamEnded()
		})
	case *http2.DataFrame:
		n := len(f.Data())
		cn.update(f.StreamID, func(s *Stream) { s.Received += n; s.Ended = s.Ended || f.StreamEnded() })
		if cn.reads && f.Length > 0 {
			return cn.write(func() error {
				return errors.Join(cn.fr.WriteWindowUpdate(0, f.Length), cn.fr.WriteWindowUpdate(f.StreamID, f.Length))
			})
		}
	case *http2.RSTStreamFrame:
		cn.update(f.StreamID, func(s *Stream) { s.Reset, s.WasReset = f.ErrCode, true })
	case *http2.GoAwayFrame:
		return errors.New("h2craw: GOAWAY " + f.ErrCode.String())
	}
	return nil
}

// write runs w under the write lock.
func (cn *Conn) write(w func() error) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	return w()
}

// update changes stream id's record under the lock.
func (cn *Conn) update(id uint32, f func(*Stream)) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if s := cn.streams[id]; s != nil {
		f(s)
	}
}
