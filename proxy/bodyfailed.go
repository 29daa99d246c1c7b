package proxy

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// closeUnread marks an HTTP/1 connection to close after the answer to a
// request whose body is left unread. Otherwise net/http reads (discards)
// up to 256 KiB of it before answering, with no deadline: a client that
// trickles its body would hold the answer, and the connection, forever.
// (On HTTP/2 the stream is reset instead; a "Connection: close" there
// would end every other stream of the connection.)
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// bodyRefusal is the answer to a body that failed on the client's side
// (too large, too slow, no memory for it), whether found while reading it
// whole or while it streamed upstream; ok is false for any other error.
func bodyRefusal(err error, streamed bool) (f refusal, ok bool) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		f = refusal{status: http.StatusRequestEntityTooLarge, reason: reasonBodyTooLarge, kind: "invalid_request_error",
			message: "meterproxy: request body exceeds server.max_body_bytes"}
		if streamed {
			f.message = "meterproxy: request body exceeds server.max_upload_bytes"
		}
	case errors.Is(err, errBodyTimeout):
		f = refusal{status: http.StatusRequestTimeout, reason: reasonBodyTimeout, kind: "invalid_request_error",
			message: "meterproxy: the request body did not arrive within server.body_read_timeout"}
		if streamed {
			f.message = "meterproxy: the request body stalled for longer than server.body_read_timeout"
		}
	case errors.Is(err, errBodyMemory):
		f = refusal{status: http.StatusServiceUnavailable, reason: reasonBodyMemory, kind: "api_error", retry: true, retryAfter: time.Second,
			message: "meterproxy: too many request bodies in memory (server.max_body_memory_bytes); retry shortly"}
	default:
		return refusal{}, false
	}
	return f, true
}

// bodyFailed answers a request whose body could not be read.
func bodyFailed(w http.ResponseWriter, r *http.Request, ex *exchange, err error) {
	closeUnread(w, r)
	f, ok := bodyRefusal(err, ex.rt.streamed())
	switch {
	case ok:
	case r.Context().Err() != nil:
		return // the client left: nothing is written, and it counts as cancelled
	default:
		f = refusal{status: http.StatusBadRequest, reason: reasonBadRequest,
			kind: "invalid_request_error", message: "meterproxy: could not read the request body"}
	}
	ex.refuse(f)
	if f.reason == reasonBodyMemory || f.reason == reasonBodyTooLarge {
		linger(w, r)
	}
}

// lingerTime and lingerBytes bound how long and how much of a refused
// HTTP/1 body linger reads.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// linger reads and throws away what the client still sends of a refused
// HTTP/1 body, once the answer is out, for at most lingerTime and
// lingerBytes. A client still writing its body when the connection closes
// gets a reset, and a reset drops the answer waiting unread in its socket:
// it would see "broken pipe" instead of the 503 or 413 that says why. The
// connection closes afterwards all the same (closeUnread).
func linger(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.Body == nil {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
}
