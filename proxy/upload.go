package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// streamBody prepares the body of a batch or upload request (route
// streamed) to pass through without being held in memory: at most
// server.max_upload_bytes, and each read must make progress within
// server.body_read_timeout (the deadline moves on as bytes arrive, as
// nginx's client_body_timeout does, so a 500 MB upload on a slow link
// goes through and a stalled one does not hold its connections).
//
// golang/go#40747: an HTTP/1 server may close a request body once the
// handler writes its response, so an upstream that answers before it has
// read the whole upload (an early 4xx) would cut the transport's copy of
// the body and with it the response. Full duplex keeps the body readable
// while the answer goes back. The body's stop must be called before the
// handler returns; after it the body no longer touches the connection's
// deadline.
func (b *bodyReader) streamBody(w http.ResponseWriter, r *http.Request, maxUpload int64) (*streamedBody, error) {
	if r.ContentLength > maxUpload {
		return nil, errBodyTooLarge
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/2 is full duplex already
	sb := &streamedBody{rc: rc, timeout: b.timeout, src: http.MaxBytesReader(w, r.Body, maxUpload)}
	sb.extend()
	r.Body = sb
	return sb, nil
}

// streamedBody is a request body passing through, with a read deadline
// that moves on with every read that returns bytes and is cleared at its
// end. The transport reads it from its own goroutine.
type streamedBody struct {
	rc      *http.ResponseController
	timeout time.Duration
	src     io.ReadCloser
	mu      sync.Mutex
	stopped bool
	failed  error // why reading failed: errBodyTooLarge, errBodyTimeout, …
	// meter, when set, gets a copy of every read (batchupload.go).
	meter *uploadMeter
	// read counts the bytes read, for the access log; the transport reads
	// on a goroutine of its own.
	read atomic.Int64
}

// Read implements io.Reader.
func (s *streamedBody) Read(p []byte) (int, error) {
	n, err := s.src.Read(p)
	s.read.Add(int64(n))
	if s.meter != nil {
		s.meter.feed(p[:n], err)
	}
	switch {
	case err != nil:
		s.clear() // EOF or failure: no deadline may outlive the body
	case n > 0:
		s.extend()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = readError(err)
		s.mu.Lock()
		s.failed = err
		s.mu.Unlock()
	}
	return n, err
}

// err returns why reading the body failed, or nil. A read that failed on
// the client's side also cancels the request's context, so the transport's
// error alone cannot tell it from a client that left.
func (s *streamedBody) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Close implements io.Closer.
func (s *streamedBody) Close() error {
	s.clear()
	return s.src.Close()
}

func (s *streamedBody) extend() { s.deadline(time.Now().Add(s.timeout)) }
func (s *streamedBody) clear()  { s.deadline(time.Time{}) }

func (s *streamedBody) deadline(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		_ = s.rc.SetReadDeadline(t)
	}
}

// stop clears the deadline and detaches the body from the connection.
func (s *streamedBody) stop() {
	s.clear()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}
