package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// connStreams counts the requests of unknown callers in progress on one
// client connection. An HTTP/2 connection announces how many streams it
// takes (server.max_concurrent_streams) before any request says who sends
// them, so that bound is everyone's; the requests of callers no key names
// are bounded per connection as they come instead, by
// server.max_unknown_caller_streams.
type connStreams struct{ unknown atomic.Int64 }

type connStreamsKey struct{}

// withConnStreams is the proxy listener's http.Server.ConnContext: every
// connection gets its count.
func withConnStreams(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connStreamsKey{}, &connStreams{})
}

// enterUnknown counts r, an unknown caller's request, on its connection
// when that is an HTTP/2 one (an HTTP/1 connection carries one request at
// a time), and reports whether it is within limit; leave undoes the count
// and must be called either way.
func enterUnknown(r *http.Request, limit int) (leave func(), ok bool) {
	cs, _ := r.Context().Value(connStreamsKey{}).(*connStreams)
	if cs == nil || r.ProtoMajor != 2 {
		return func() {}, true
	}
	n := cs.unknown.Add(1)
	return func() { cs.unknown.Add(-1) }, n <= int64(limit)
}

// tooManyStreams is the refusal of an unknown caller's request past limit
// on one HTTP/2 connection.
func tooManyStreams(limit int) refusal {
	return refusal{status: http.StatusTooManyRequests, reason: reasonTooManyStreams, kind: "rate_limit_error",
		retry: true, retryAfter: time.Second,
		message: fmt.Sprintf("meterproxy: a caller without a configured key may have at most %d requests in progress on one HTTP/2 connection (server.max_unknown_caller_streams); retry when one ends, or open another connection", limit)}
}
