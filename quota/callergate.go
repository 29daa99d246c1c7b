package quota

import (
	"context"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// callerGate is one per-caller limit a request passes before it waits
// for its pool: a caller's cap (capGate) today, a spend budget next —
// each one more gate of this shape, keyed by caller (the model is
// grafana/dskit's gate). Implementations are safe for concurrent use.
type callerGate interface {
	// Start waits until caller's request of class may go, at most until
	// until or ctx ends, and returns its pass, whose release gives the
	// place back when the request ends. A refusal is a *RefusedError with
	// Caller set (its queue is full, or until passed); it returns
	// ErrStoreUnavailable under store.on_error "closed", ErrClosed once
	// the gate stopped, or ctx's cause.
	Start(ctx context.Context, caller string, class classify.Class, until time.Time) (gatePass, error)
}

// gatePass is a request's way through a callerGate. Its zero value is a
// pass that held nothing: release is nil.
type gatePass struct {
	// release gives the place back; nil when the gate held none for it.
	release func()
	// held says the request waited at the gate.
	held bool
}

// Release gives p's place back; it does nothing for a pass that held
// none.
func (p gatePass) Release() {
	if p.release != nil {
		p.release()
	}
}

var _ callerGate = gateChain(nil)

// gateChain is a request's caller gates, passed in order: the caller's
// cap today, its spend budget next. Its pass releases every gate's.
type gateChain []callerGate

// Start implements callerGate: each gate in turn, within the one until;
// a refusal gives back what the gates before it granted.
func (ch gateChain) Start(ctx context.Context, caller string, class classify.Class, until time.Time) (gatePass, error) {
	if len(ch) == 1 {
		return ch[0].Start(ctx, caller, class, until)
	}
	var passes []gatePass
	held := false
	for _, g := range ch {
		p, err := g.Start(ctx, caller, class, until)
		if err != nil {
			for _, q := range passes {
				q.Release()
			}
			return gatePass{}, err
		}
		held = held || p.held
		if p.release != nil {
			passes = append(passes, p)
		}
	}
	if len(passes) == 0 {
		return gatePass{held: held}, nil
	}
	return gatePass{held: held, release: func() {
		for _, p := range passes {
			p.Release()
		}
	}}, nil
}
