package fakeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// sseEvent is one server-sent event, or one socket message. A string data
// is written as is; anything else as JSON.
type sseEvent struct {
	name string // the event: line; empty for none
	data any
}

// streamPlan is a whole stream: the content chunks are where the pacing
// and the stall and cut knobs apply.
type streamPlan struct {
	head   []sseEvent
	chunks []sseEvent
	tail   []sseEvent
}

// events are the plan's events in order.
func (p streamPlan) events() []sseEvent {
	out := make([]sseEvent, 0, len(p.head)+len(p.chunks)+len(p.tail))
	out = append(out, p.head...)
	out = append(out, p.chunks...)
	return append(out, p.tail...)
}

// eventSink is where a stream's events go: an SSE response (sseWriter) or
// a WebSocket (socketSink). One plan is played onto either by
// exchange.play, so both carry the same events.
type eventSink interface {
	// send writes e; it fails once the client has gone away.
	send(e sseEvent) error
	// pause waits d, or less if the client goes away.
	pause(d time.Duration) error
	// stall hangs until the client goes away.
	stall()
	// abort cuts the transport without a proper end. The SSE sink never
	// returns from it (net/http's abort panic).
	abort()
}

// sseWriter writes events and flushes after each one.
type sseWriter struct {
	ctx context.Context
	w   io.Writer
	rc  *http.ResponseController
}

var _ eventSink = sseWriter{}

// send writes e and flushes; it fails once the client has gone away.
func (s sseWriter) send(e sseEvent) error {
	data, ok := e.data.(string)
	if !ok {
		b, err := json.Marshal(e.data)
		if err != nil {
			return fmt.Errorf("fakeprovider: encode event %q: %w", e.name, err)
		}
		data = string(b)
	}
	var err error
	if e.name != "" {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", e.name, data)
	} else {
		_, err = fmt.Fprintf(s.w, "data: %s\n\n", data)
	}
	if err == nil {
		err = s.rc.Flush()
	}
	if err == nil {
		err = s.ctx.Err()
	}
	return err
}

// pause waits d, or less if the client goes away.
func (s sseWriter) pause(d time.Duration) error { return pause(s.ctx, d) }

func (s sseWriter) stall() { <-s.ctx.Done() }

// abort aborts the response, net/http's way.
func (s sseWriter) abort() { panic(http.ErrAbortHandler) }

// pause waits d, or less if ctx ends first, and reports ctx's error.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream answers 200 with plan: as an event stream, or onto the socket of
// a WebSocket turn (x.sink); play paces it and ends it Config.EndLag after
// its last event.
func (x *exchange) stream(plan streamPlan) {
	x.status = http.StatusOK
	if x.sink != nil {
		x.play(plan, x.sink)
		return
	}
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.play(plan, sseWriter{ctx: x.r.Context(), w: x.w, rc: http.NewResponseController(x.w)})
}

// play sends plan's events to s, paced by Config.ChunkInterval between
// content chunks, honouring the stall, cut and terminal knobs (faults.go),
// and records how the stream ended in x.outcome.
func (x *exchange) play(plan streamPlan, s eventSink) {
	x.outcome = streamCut // until the last event is out
	events := plan.events()
	head, n, total := len(plan.head), len(plan.chunks), len(events)
	f, interval := x.faults, x.p.cfg.ChunkInterval
	cutAt := f.cutAt.index(head, n, total)
	for i := 0; i <= total; i++ {
		if i == cutAt {
			x.outcome = streamAborted
			s.abort()
			return
		}
		if i == total {
			break
		}
		// Before content chunk c, or before the tail when c == n.
		if c := i - head; c >= 0 && c <= n {
			if c == min(f.stallAfter, n) {
				s.stall()
				return
			}
			if c == min(f.cutAfter, n) {
				x.outcome = streamAborted
				s.abort()
				return
			}
			if c > 0 && s.pause(interval) != nil {
				return
			}
		}
		if i == total-1 && s.pause(f.terminalDelay) != nil {
			return
		}
		if s.send(events[i]) != nil {
			return
		}
	}
	x.outcome = streamCompleted // every event is out, whatever the client does next
	_ = s.pause(x.p.cfg.EndLag)
}
