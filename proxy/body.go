package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Errors of reading a request body.
var (
	// errBodyTooLarge means the body is over server.max_body_bytes (or
	// server.max_upload_bytes for a streamed upload).
	errBodyTooLarge = errors.New("proxy: request body too large")
	// errBodyTimeout means the body did not arrive within
	// server.body_read_timeout.
	errBodyTimeout = errors.New("proxy: request body read timed out")
	// errBodyMemory means holding the body would take the bodies in memory
	// past server.max_body_memory_bytes.
	errBodyMemory = errors.New("proxy: request body memory budget exhausted")
)

// firstChunk is the most a body buffer starts with before bytes arrive:
// a client that declares 32 MiB and sends one byte costs this much, not
// 32 MiB. Small bodies (a chat turn) fit at once.
const firstChunk = 8 << 10

// bodyReader reads request bodies whole before admission, bounded three
// ways: each body by server.max_body_bytes, the time to read it by
// server.body_read_timeout, and the bytes of every body in memory at once
// (held requests' included) by the budget. The proxy needs the whole body
// before forwarding: to answer 413 before any upstream call, to estimate
// tokens, and because forwarding a body while the upstream already
// answers truncates streamed responses (golang/go#40747).
type bodyReader struct {
	max     int64
	timeout time.Duration
	budget  *memBudget
}

func newBodyReader(cfg ServerConfig) *bodyReader {
	return &bodyReader{max: cfg.MaxBodyBytes, timeout: cfg.BodyReadTimeout, budget: newMemBudget(cfg.MaxBodyMemoryBytes)}
}

// body is a request body in memory, charged to the budget until release.
type body struct {
	buf    []byte
	budget *memBudget
	held   int64 // bytes charged to the budget
}

// Bytes returns the body.
func (b *body) Bytes() []byte { return b.buf }

// charge adds n bytes the request holds besides its buffer (a rewritten
// copy of it), past the budget if need be: they are few and already
// allocated.
func (b *body) charge(n int64) { b.budget.force(n); b.held += n }

// release gives the body's bytes back to the budget; later calls do
// nothing.
func (b *body) release() { b.budget.give(b.held); b.held = 0 }

// read returns r's body. The buffer grows as bytes arrive (never to the
// declared length before they do), each growth charged to the budget:
// a request of the interactive class may use the whole budget, others
// only the part interactive does not keep (see memBudget). The read
// deadline is cleared before read returns, so it never cuts a request
// that waits for admission.
func (b *bodyReader) read(w http.ResponseWriter, r *http.Request, interactive bool) (*body, error) {
	if r.ContentLength > b.max {
		return nil, errBodyTooLarge
	}
	setReadDeadline(w, time.Now().Add(b.timeout)) // skipped by test recorders, which take none
	defer setReadDeadline(w, time.Time{})
	limit, exact := b.max, r.ContentLength >= 0
	var src io.Reader = r.Body // a declared length within max: net/http reads no further
	if exact {
		limit = r.ContentLength
	} else {
		src = http.MaxBytesReader(w, r.Body, b.max)
	}
	bd := &body{budget: b.budget}
	for {
		if len(bd.buf) == cap(bd.buf) {
			switch {
			case int64(len(bd.buf)) < limit:
				if err := bd.grow(limit, interactive); err != nil {
					bd.release()
					return nil, err
				}
			case exact:
				return bd, nil
			default: // a chunked body at max_body_bytes: only EOF may follow
				err := atEnd(src)
				if err != nil {
					bd.release()
				}
				return bd, err
			}
		}
		n, err := src.Read(bd.buf[len(bd.buf):cap(bd.buf)])
		bd.buf = bd.buf[:len(bd.buf)+n]
		switch {
		case err == io.EOF:
			return bd, nil
		case err != nil:
			bd.release()
			return nil, readError(err)
		}
	}
}

// atEnd reads what follows a body that has reached max_body_bytes: nil at
// EOF, errBodyTooLarge if a byte follows.
func atEnd(src io.Reader) error {
	var one [1]byte
	for {
		n, err := src.Read(one[:])
		switch {
		case n > 0:
			return errBodyTooLarge
		case err == io.EOF:
			return nil
		case err != nil:
			return readError(err)
		}
	}
}

// grow doubles the buffer (at least firstChunk, at most limit, which is
// above its capacity), charging the new bytes to the budget first.
func (b *body) grow(limit int64, interactive bool) error {
	have := int64(cap(b.buf))
	next := min(max(2*have, firstChunk), limit)
	if !b.budget.take(next-have, interactive) {
		return errBodyMemory
	}
	b.held += next - have
	buf := make([]byte, len(b.buf), next)
	copy(buf, b.buf)
	b.buf = buf
	return nil
}

// readError names why a body read failed.
func readError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errBodyTooLarge
	}
	if isTimeout(err) { // os.ErrDeadlineExceeded is a net.Error timeout
		return errBodyTimeout
	}
	return err
}

// setBody makes r carry body, with a known length and a GetBody so the
// transport may replay it on a fresh connection, and returns the body it
// carries (nil when empty). Each is an io.NopCloser of a bytes.Reader:
// net/http knows such a body is in memory and writes a request's head and
// body in one write, where any other body has its head flushed first (an
// extra system call and packet a request: net/http's rule for bodies it
// does not know are in memory). ReverseProxy wraps the body it forwards in
// a reader of its own, so the retry loop (roundTrip) puts this one back.
func setBody(r *http.Request, body []byte) io.ReadCloser {
	r.TransferEncoding = nil
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body, r.GetBody = http.NoBody, nil
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r.Body
}

// copyBuffers is the ReverseProxy's pool of response copy buffers, kept
// as pointers to their arrays: a buffer goes back without a pointer made
// for it.
type copyBuffers struct{ pool sync.Pool }

// copyBuffer is the size of a response copy buffer, ReverseProxy's own.
const copyBuffer = 32 << 10

func newCopyBuffers() *copyBuffers {
	return &copyBuffers{pool: sync.Pool{New: func() any { return new([copyBuffer]byte) }}}
}

// Get implements httputil.BufferPool.
func (c *copyBuffers) Get() []byte { return c.pool.Get().(*[copyBuffer]byte)[:] }

// Put implements httputil.BufferPool; a buffer not of Get's is dropped.
func (c *copyBuffers) Put(b []byte) {
	if cap(b) >= copyBuffer {
		c.pool.Put((*[copyBuffer]byte)(b[:copyBuffer]))
	}
}
