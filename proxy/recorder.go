package proxy

import (
	"io"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// recorder is every answer's writer: it remembers what was written to the
// client, and whether meterproxy refused the request, so the request is
// counted as exactly one outcome (Handler.count). It keeps
// http.ResponseController working through Unwrap, which ReverseProxy uses
// to flush streams and the body reader to set deadlines.
type recorder struct {
	http.ResponseWriter
	// status is the status the client got; 0 before any.
	status int
	// refused is the reason meterproxy answered instead of the upstream
	// (set by refuse).
	refused string
	// clientFailed is set when writing or flushing to the client failed:
	// a response cut short then was cut by the client, even before its
	// leaving cancels the request's context.
	clientFailed bool
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
	r.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	if err != nil {
		r.clientFailed = true
	}
	return n, err
}

// Flush implements http.Flusher for callers that type-assert.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError flushes to the client and reports its failure, so
// ReverseProxy (through http.ResponseController) stops a stream whose
// client is gone.
func (r *recorder) FlushError() error {
	err := http.NewResponseController(r.ResponseWriter).Flush()
	if err != nil {
		r.clientFailed = true
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
