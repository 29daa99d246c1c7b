package fakeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// sseEvent is one server-sent event. A string data is written as is;
// anything else as JSON.
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

// sseWriter writes events and flushes after each one.
type sseWriter struct {
	ctx context.Context
	w   io.Writer
	rc  *http.ResponseController
}

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

func (s sseWriter) sendAll(events []sseEvent) error {
	for _, e := range events {
		if err := s.send(e); err != nil {
			return err
		}
	}
	return nil
}

// pause waits d, or less if the client goes away.
func (s sseWriter) pause(d time.Duration) error {
	if d <= 0 {
		return s.ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// stream answers 200 with plan as an event stream, paced by
// Config.ChunkInterval, honouring the stall and cut knobs, and ends it
// Config.EndLag after its last event.
func (x *exchange) stream(plan streamPlan) {
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.status = http.StatusOK
	x.w.WriteHeader(http.StatusOK)
	s := sseWriter{ctx: x.r.Context(), w: x.w, rc: http.NewResponseController(x.w)}
	x.outcome = streamCut // until the last event is out
	if s.sendAll(plan.head) != nil {
		return
	}
	n, interval := len(plan.chunks), x.p.cfg.ChunkInterval
	for i := 0; i <= n; i++ {
		if i == min(x.faults.stallAfter, n) {
			<-s.ctx.Done()
			return
		}
		if i == min(x.faults.cutAfter, n) {
			x.outcome = streamAborted
			panic(http.ErrAbortHandler) // net/http's way to abort a response
		}
		if i == n {
			break
		}
		if i > 0 && s.pause(interval) != nil {
			return
		}
		if s.send(plan.chunks[i]) != nil {
			return
		}
	}
	if s.pause(interval) != nil || s.sendAll(plan.tail) != nil {
		return
	}
	x.outcome = streamCompleted // every event is out, whatever the client does next
	_ = s.pause(x.p.cfg.EndLag)
}
