package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// errBodyTooLarge means the body is over server.max_body_bytes.
var errBodyTooLarge = errors.New("proxy: request body too large")

// maxPooledBody is the largest buffer kept for reuse; bigger ones are left
// to the garbage collector so one huge upload does not pin memory.
const maxPooledBody = 1 << 20

// bodyReader reads request bodies whole, bounded, into pooled buffers. The
// proxy needs the whole body before forwarding: to answer 413 before any
// upstream call, and because forwarding a body while the upstream already
// answers truncates streamed responses (golang/go#40747).
type bodyReader struct {
	max  int64
	pool sync.Pool
}

func newBodyReader(limit int64) *bodyReader {
	return &bodyReader{max: limit, pool: sync.Pool{New: func() any { return new(bytes.Buffer) }}}
}

// read returns r's body in a buffer the caller must give back with put.
func (b *bodyReader) read(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, error) {
	if r.ContentLength > b.max {
		return nil, errBodyTooLarge
	}
	buf := b.pool.Get().(*bytes.Buffer)
	buf.Reset()
	body := http.MaxBytesReader(w, r.Body, b.max)
	var err error
	if n := r.ContentLength; n > 0 {
		// Exactly the declared length: ReadFrom would keep 512 bytes spare,
		// and a held request keeps its body for the whole wait.
		buf.Grow(int(n))
		p := buf.AvailableBuffer()[:n]
		if _, err = io.ReadFull(body, p); err == nil {
			buf.Write(p)
		}
	} else {
		_, err = buf.ReadFrom(body)
	}
	if err != nil {
		b.put(buf)
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, errBodyTooLarge
		}
		return nil, err
	}
	return buf, nil
}

func (b *bodyReader) put(buf *bytes.Buffer) {
	if buf != nil && buf.Cap() <= maxPooledBody {
		b.pool.Put(buf)
	}
}

// setBody makes r carry body, with a known length and a GetBody so the
// transport may replay it on a fresh connection.
func setBody(r *http.Request, body []byte) {
	r.TransferEncoding = nil
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body, r.GetBody = http.NoBody, nil
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

// copyBuffers is the ReverseProxy's pool of response copy buffers.
type copyBuffers struct{ pool sync.Pool }

func newCopyBuffers() *copyBuffers {
	return &copyBuffers{pool: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

// Get implements httputil.BufferPool.
func (c *copyBuffers) Get() []byte { return *c.pool.Get().(*[]byte) }

// Put implements httputil.BufferPool.
func (c *copyBuffers) Put(b []byte) { c.pool.Put(&b) }
