package gate

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
)

// Run serves the gate's lines until ctx ends, then refuses every waiter
// with ErrClosed and tells the counter what is still in flight. Call it
// once.
func (g *CapGate) Run(ctx context.Context) error {
	timer := store.StoppedTimer()
	defer timer.Stop()
	beat, stopBeat := store.HeartbeatTicker(g.heartbeat)
	defer stopBeat()
	for {
		alive := false
		select {
		case <-ctx.Done():
			g.closeWith(ErrClosed)
			g.flush(context.WithoutCancel(ctx))
			return nil
		case <-g.wake:
		case <-timer.C:
		case <-beat:
			alive = true
		}
		if next := g.round(ctx, time.Now(), alive); !next.IsZero() {
			timer.Reset(max(time.Until(next), time.Millisecond))
		}
	}
}

// capCall is one counter call of a round: the line and what it asked.
type capCall struct {
	ln *capLine
	t  capTake
}

// round asks the counter for every line that needs it at now (alive:
// lines holding slots must show they are alive too), hands out the
// grants, and returns when the next line may be granted (zero: none is
// waiting on the clock).
func (g *CapGate) round(ctx context.Context, now time.Time, alive bool) (next time.Time) {
	g.mu.Lock()
	var calls []capCall
	for _, ln := range g.lines {
		waits := ln.queued() > 0 && !now.Before(ln.retryAt)
		if waits || ln.inFlight != ln.reported || (alive && (ln.inFlight > 0 || ln.reported > 0)) {
			calls = append(calls, capCall{ln: ln, t: ln.takeLocked()})
			ln.asking = true
		}
	}
	g.mu.Unlock()
	for _, c := range calls {
		ans, err := g.counter.take(ctx, c.t)
		g.mu.Lock()
		g.answerLocked(ctx, c, ans, err, now)
		g.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, ln := range g.lines {
		if ln.lifted() && ln.inFlight == 0 && ln.reported == 0 {
			delete(g.lines, name) // the counter heard its last slot come back
			continue
		}
		if ln.queued() > 0 && !ln.retryAt.IsZero() && (next.IsZero() || ln.retryAt.Before(next)) {
			next = ln.retryAt
		}
	}
	return next
}

// takeLocked is what the counter is asked for ln: as many of its
// waiters as its cap can grant in one call.
func (ln *capLine) takeLocked() capTake {
	t := capTake{Name: ln.name, InFlight: ln.inFlight, Cap: ln.fleet, Local: ln.local}
	if ln.lifted() {
		t.Cap = capBounds{MaxInFlight: unbounded, RequestsPerMinute: unbounded}
		t.Local = t.Cap
		return t
	}
	t.Want = min(int64(ln.queued()), int64(capListBound(ln.cap)))
	return t
}

// answerLocked records the counter's answer to c: what it heard, the
// fleet's count, and the grants, to ln's oldest waiters, interactive
// first. Those left waiting are held until RetryAfter, or a slot of
// theirs comes back.
func (g *CapGate) answerLocked(ctx context.Context, c capCall, ans capAnswer, err error, now time.Time) {
	ln := c.ln
	ln.asking = false
	switch {
	case errors.Is(err, store.ErrStoreUnavailable):
		g.refuseLocked(ln, err)
		return
	case err != nil:
		if ctx.Err() == nil {
			g.log.Warn("store_cap_take_failed", slog.String("error", err.Error()))
		}
		ln.retryAt = now.Add(store.Retry)
		return
	}
	ln.reported = c.t.InFlight + ans.Granted
	ln.fleetInFlight = ans.FleetInFlight
	if ans.Granted > 0 {
		ln.sec = ans.Sec
	}
	n := ans.Granted
	for cl := range ln.waiting {
		for n > 0 && len(ln.waiting[cl]) > 0 {
			w := ln.waiting[cl][0]
			ln.waiting[cl] = ln.waiting[cl][1:]
			w.granted = true
			ln.inFlight++
			close(w.done)
			n--
		}
	}
	// Grants nobody was left to take (they left during the call) are the
	// counter's until the next call hears the count without them.
	ln.retryAt = time.Time{}
	if ln.queued() > 0 {
		for cl := range ln.waiting {
			for _, w := range ln.waiting[cl] {
				w.held = true
			}
		}
		if ans.RetryAfter > 0 {
			ln.retryAt = now.Add(ans.RetryAfter)
		}
	}
}

// refuseLocked ends ln's waiters with err.
func (g *CapGate) refuseLocked(ln *capLine, err error) {
	for cl := range ln.waiting {
		for _, w := range ln.waiting[cl] {
			w.err = err
			close(w.done)
		}
		ln.waiting[cl] = nil
	}
}

// closeWith refuses every waiter and every later Start with err; the
// first call decides the error.
func (g *CapGate) closeWith(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed, g.closeErr = true, err
	for _, ln := range g.lines {
		g.refuseLocked(ln, err)
	}
}

// flush tells the counter what this replica still holds when the gate
// stops, so a shared counter does not wait for the heartbeat to expire.
func (g *CapGate) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	g.mu.Lock()
	var calls []capTake
	for _, ln := range g.lines {
		if ln.inFlight != 0 || ln.reported != 0 {
			calls = append(calls, ln.takeLocked())
		}
	}
	g.mu.Unlock()
	for _, t := range calls {
		t.Want = 0
		if _, err := g.counter.take(ctx, t); err != nil {
			g.log.Warn("store_flush_failed", slog.String("error", err.Error()))
		}
	}
}
