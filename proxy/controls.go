package proxy

import (
	"fmt"
	"net/http"
	"time"
)

// errNoFlush is what flushing a writer that cannot flush reports, as
// http.ResponseController does (errors.Is http.ErrNotSupported), made
// once rather than on each call.
var errNoFlush = fmt.Errorf("proxy: flush: %w", http.ErrNotSupported)

// controlOf finds what http.ResponseController would find on w: the
// first writer in its Unwrap chain that implements T. Unlike the
// controller it reports a writer that has none (the test recorders) by
// false, with no error made for it: a deadline a writer cannot take is
// only skipped, on every request.
func controlOf[T any](w http.ResponseWriter) (T, bool) {
	for {
		if t, ok := w.(T); ok {
			return t, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			var none T
			return none, false
		}
		w = u.Unwrap()
	}
}

// setReadDeadline sets w's connection's read deadline (the stream's, on
// HTTP/2), when its writer takes one.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	if d, ok := controlOf[interface{ SetReadDeadline(time.Time) error }](w); ok {
		_ = d.SetReadDeadline(t)
	}
}

// setWriteDeadline sets w's connection's write deadline (the stream's,
// on HTTP/2), when its writer takes one.
func setWriteDeadline(w http.ResponseWriter, t time.Time) {
	if d, ok := controlOf[interface{ SetWriteDeadline(time.Time) error }](w); ok {
		_ = d.SetWriteDeadline(t)
	}
}

// flush flushes w as http.ResponseController.Flush does: FlushError
// where the writer has it, else Flush; errNoFlush when it has neither.
func flush(w http.ResponseWriter) error {
	for {
		switch t := w.(type) {
		case interface{ FlushError() error }:
			return t.FlushError()
		case http.Flusher:
			t.Flush()
			return nil
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return errNoFlush
		}
	}
}
