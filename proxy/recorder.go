package proxy

import "net/http"

// recorder remembers what was written to the client, so each request can be
// counted as exactly one outcome. It keeps http.ResponseController working
// through Unwrap, which ReverseProxy uses to flush streams.
type recorder struct {
	http.ResponseWriter
	status int
	// refused is the reason meterproxy answered instead of the upstream.
	refused string
	// cancelled is set when the client left before any answer.
	cancelled bool
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
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for callers that type-assert.
func (r *recorder) Flush() {
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
