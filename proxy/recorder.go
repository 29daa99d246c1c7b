package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// recorder is every answer's writer: it remembers what was written to the
// client, and whether meterproxy refused the request, so the request is
// counted as exactly one outcome (records.count). It keeps
// http.ResponseController working through Unwrap, which ReverseProxy uses
// to flush streams and the body reader to set deadlines.
//
// Before every write and flush it moves the connection's write deadline
// (the stream's, on HTTP/2) to stall from now (server.write_stall_timeout,
// give or take renewSlack):
// a client that stops reading fails the write that waits on it, and the
// answer is cut, while one that keeps reading is never timed out however
// long its answer streams.
type recorder struct {
	http.ResponseWriter
	// stall is how far ahead the write deadline is set (0: none, as for
	// the test recorders), and deadline the last one set.
	stall    time.Duration
	deadline time.Time
	// status is the status the client got; 0 before any.
	status int
	// refused is the reason meterproxy answered instead of the upstream
	// (set by refuse); negotiated the reason of a front-door answer that
	// is protocol negotiation instead (refusal.negotiation), counted
	// apart (records.count).
	refused, negotiated string
	// clientFailed is set when writing or flushing to the client failed:
	// a response cut short then was cut by the client, even before its
	// leaving cancels the request's context.
	clientFailed bool
	// stalled says a write failed past its deadline; starved that the
	// answer read ahead of the client was cut off (starve), from the
	// read-ahead's goroutine.
	stalled bool
	starved atomic.Bool
	// written counts the body bytes written to the client.
	written int64
	// decide is the exchange whose decision headers (decision.go) go on
	// the final answer's, or a WebSocket's 101, set just before they
	// are written; nil with server.decision_headers off, and once they
	// are set.
	decide *exchange
	// slots hold the values of the headers meterproxy sets (slotOf).
	slots headerSlots
}

// headerSlots back the one value of each header meterproxy sets on an
// answer or its upstream request (the request id, the decision headers,
// Accept-Encoding), held with the recorder rather than made for each
// header.
type headerSlots [slotCount]string

// The headerSlots' indexes.
const (
	slotRequestID = iota
	slotUpstreamID
	slotAcceptEncoding
	slotClass
	slotAccount
	slotPool
	slotQueueMs
	slotCount
)

// value returns v as a header's values, held in slot i: a slice of one
// with no room to grow, so an Add copies it rather than writing into the
// slot after it.
func (s *headerSlots) value(i int, v string) []string {
	s[i] = v
	return s[i : i+1 : i+1]
}

// Why meterproxy cut a client off (recorder.cutFor).
const (
	// cutWriteStalled: a write waited on the client longer than
	// server.write_stall_timeout.
	cutWriteStalled = "write_stalled"
	// cutBodyMemory: the client was behind its answer when the body
	// memory budget could hold no more of it (readahead.go).
	cutBodyMemory = "body_memory"
)

// renewSlack is the part of the stall a deadline may have run down
// before renew moves it (a hundredth): a stream's many small writes move
// it once in a while, not each time (on HTTP/2 each move is a message to
// the connection's loop).
const renewSlack = 100

// renew moves the write deadline to stall from now (to now, once the
// client is starved); skipped by test recorders, which take none.
func (r *recorder) renew() {
	switch {
	case r.starved.Load():
		setWriteDeadline(r.ResponseWriter, time.Now())
	case r.stall > 0:
		now := time.Now()
		if r.deadline.Sub(now) > r.stall-r.stall/renewSlack {
			return
		}
		r.deadline = now.Add(r.stall)
		setWriteDeadline(r.ResponseWriter, r.deadline)
	}
}

// starve cuts the client off because its answer could be read ahead of
// it no further (readahead.go): the write it holds up fails now. Safe to
// call from another goroutine than the writer's.
func (r *recorder) starve() {
	r.starved.Store(true)
	setWriteDeadline(r.ResponseWriter, time.Now())
}

// failed records that writing to the client failed, and whether its
// deadline had passed: the client stalled.
func (r *recorder) failed() {
	r.clientFailed = true
	if r.stall > 0 && !time.Now().Before(r.deadline) {
		r.stalled = true
	}
}

// clientCut reports whether the client's side cut the answer short: it
// failed a write, or meterproxy cut it off.
func (r *recorder) clientCut() bool { return r.clientFailed || r.starved.Load() }

// cutFor says why meterproxy itself cut the client off, for the log:
// cutBodyMemory or cutWriteStalled; "" when it did not.
func (r *recorder) cutFor() string {
	switch {
	case r.starved.Load():
		return cutBodyMemory
	case r.stalled:
		return cutWriteStalled
	}
	return ""
}

// refuse marks the request refused for reason; the first refusal wins.
func (r *recorder) refuse(reason string) {
	if r.refused == "" {
		r.refused = reason
	}
}

// outcome is how the request ended, as meterproxy_requests_total labels
// it: refused when meterproxy answered (with the status it wrote),
// cancelled when nothing was written (the client left first), else
// forwarded with the upstream's status.
func (r *recorder) outcome() (outcome, code string) {
	switch {
	case r.refused != "":
		return outcomeRefused, statusCode(r.status)
	case r.status == 0:
		return outcomeCancelled, "none"
	default:
		return outcomeForwarded, statusCode(r.status)
	}
}

// WriteHeader implements http.ResponseWriter.
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
	}
	if status >= 200 || status == http.StatusSwitchingProtocols {
		r.decided()
	}
	r.renew() // an informational answer (1xx) is written at once
	r.ResponseWriter.WriteHeader(status)
}

// decided sets the decision headers, once: they go out with the answer's
// header, so they are set from what is known as it is written.
func (r *recorder) decided() {
	if r.decide != nil {
		setDecision(r.Header(), r.decide, &r.slots)
		r.decide = nil
	}
}

// Write implements http.ResponseWriter.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
		r.decided()
	}
	r.renew()
	n, err := r.ResponseWriter.Write(b)
	r.written += int64(n)
	if err != nil {
		r.failed()
	}
	return n, err
}

// Flush implements http.Flusher for callers that type-assert.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError flushes to the client and reports its failure, so
// ReverseProxy (through http.ResponseController) stops a stream whose
// client is gone.
func (r *recorder) FlushError() error {
	r.renew()
	err := flush(r.ResponseWriter)
	if err != nil {
		r.failed()
	}
	return err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// stripWriter removes, from a successful event stream, the usage chunk
// meterproxy asked for on the caller's behalf (upstream.inject_stream_usage);
// any other answer passes through untouched.
type stripWriter struct {
	http.ResponseWriter
	body io.Writer // set by WriteHeader for a 200 event stream
}

// WriteHeader decides whether the body is filtered.
func (s *stripWriter) WriteHeader(status int) {
	if status == http.StatusOK && strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream") {
		s.Header().Del("Content-Length") // the body will be shorter
		s.body = usage.StripUsageChunk(s.ResponseWriter)
	}
	s.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (s *stripWriter) Write(b []byte) (int, error) {
	if s.body != nil {
		return s.body.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *stripWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *stripWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
