package fakeprovider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Fault-knob request headers; see the package documentation.
const (
	HeaderLatency    = "X-Fake-Latency"
	HeaderStatus     = "X-Fake-Status"
	HeaderRetryAfter = "X-Fake-Retry-After"
	HeaderStallAfter = "X-Fake-Stall-After"
	HeaderCutAfter   = "X-Fake-Cut-After"
	// HeaderCutAt cuts a stream's transport at a point of the stream
	// (CutAt): the SSE response aborted, the WebSocket closed without a
	// close frame.
	HeaderCutAt = "X-Fake-Cut-At"
	// HeaderTerminalDelay holds a stream's last event (response.completed,
	// response.done, message_stop, [DONE]) back this long (a Go duration).
	HeaderTerminalDelay = "X-Fake-Terminal-Delay"
	// HeaderFailAfter ends a streamed Responses reply after this many
	// content chunks with response.failed (a server_error), its usage the
	// input and the output sent: a generation that failed midway.
	HeaderFailAfter = "X-Fake-Fail-After"
)

// CutAt is a point of a stream where HeaderCutAt cuts its transport.
type CutAt string

// The points HeaderCutAt names.
const (
	// CutAfterCreated cuts after the stream's first event
	// (response.created, message_start, the role chunk).
	CutAfterCreated CutAt = "after_created"
	// CutMidDeltas cuts after half the content chunks (rounded up).
	CutMidDeltas CutAt = "mid_deltas"
	// CutBeforeTerminal cuts with every event but the last sent.
	CutBeforeTerminal CutAt = "before_terminal"
	// CutAfterTerminal sends every event, then cuts instead of ending
	// properly: an SSE response without its end, a socket without a close
	// frame.
	CutAfterTerminal CutAt = "after_terminal"
)

// index is the number of events sent before the cut, for a stream of
// head events, n content chunks and total events; -1 for none.
func (c CutAt) index(head, n, total int) int {
	switch c {
	case CutAfterCreated:
		return min(1, total)
	case CutMidDeltas:
		return head + (n+1)/2
	case CutBeforeTerminal:
		return max(total-1, 0)
	case CutAfterTerminal:
		return total
	}
	return -1
}

// faults are the knobs one request asked for.
type faults struct {
	latency       time.Duration
	hasLatency    bool
	status        int // 0 means answer normally
	retryAfter    time.Duration
	hasRetryAfter bool
	stallAfter    int // content chunks before stalling; -1 means never
	cutAfter      int // content chunks before aborting; -1 means never
	cutAt         CutAt
	failAfter     int           // content chunks before response.failed; -1 means never
	terminalDelay time.Duration // before a stream's last event
}

// parseFaults reads the knobs from h and reports every malformed one.
func parseFaults(h http.Header) (faults, error) {
	f := faults{stallAfter: -1, cutAfter: -1, failAfter: -1}
	var errs []error
	bad := func(name, v string, why string) {
		errs = append(errs, fmt.Errorf("fakeprovider: header %s: %q %s", name, v, why))
	}
	if v := h.Get(HeaderLatency); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad(HeaderLatency, v, "is not a non-negative Go duration")
		}
		f.latency, f.hasLatency = d, true
	}
	if v := h.Get(HeaderTerminalDelay); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad(HeaderTerminalDelay, v, "is not a non-negative Go duration")
		}
		f.terminalDelay = max(d, 0)
	}
	if v := h.Get(HeaderCutAt); v != "" {
		switch c := CutAt(v); c {
		case CutAfterCreated, CutMidDeltas, CutBeforeTerminal, CutAfterTerminal:
			f.cutAt = c
		default:
			bad(HeaderCutAt, v, "is not after_created, mid_deltas, before_terminal or after_terminal")
		}
	}
	if v := h.Get(HeaderStatus); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 400 || n > 599 {
			bad(HeaderStatus, v, "is not a status from 400 to 599")
		}
		f.status = n
	}
	if v := h.Get(HeaderRetryAfter); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 || s > 1e6 {
			bad(HeaderRetryAfter, v, "is not a number of seconds")
		}
		f.retryAfter, f.hasRetryAfter = time.Duration(s*float64(time.Second)), true
	}
	for _, k := range []struct {
		name string
		dst  *int
	}{{HeaderStallAfter, &f.stallAfter}, {HeaderCutAfter, &f.cutAfter}, {HeaderFailAfter, &f.failAfter}} {
		if v := h.Get(k.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad(k.name, v, "is not a non-negative chunk count")
			}
			*k.dst = n
		}
	}
	return f, errors.Join(errs...)
}

// latencyOr returns the requested latency, or def when none was asked for.
func (f faults) latencyOr(def time.Duration) time.Duration {
	if f.hasLatency {
		return f.latency
	}
	return def
}
