package quota

import (
	"context"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// The caps gate: a caller's cap (callers[].max_in_flight,
// requests_per_minute) is one across pools. With account.models set, each
// pool's counts live under a hash tag of its own, and a Redis Cluster
// script cannot reach another slot's keys; so a capped caller's request
// first takes a slot under its cap from the gate — a limiter of its own
// (keys {key_prefix:pool:CAPS}) whose account is unbounded, so that only
// the callers' caps bind — and then waits for its pool, which admits it
// uncapped, within what is left of the class's max_wait. Both leases are
// released together. The cost is one more store call for capped callers
// (none for anyone else), and a cap slot held while the request waits
// for its pool: the cap is never exceeded, and may be reached a little
// early. Without account.models the account's own store call decides
// caps, as it always did.

// capsPool names the gate's limiter. Upper case: no account.models name
// can take it.
const capsPool = "CAPS"

// gated reports whether cfg and caps call for the gate: pools of models,
// and callers with caps.
func gated(cfg Config, caps map[string]callerCap) bool {
	return len(cfg.Account.Models) > 0 && len(caps) > 0
}

// gateConfig is the gate's Config: cfg's classes and store, an account no
// load reaches.
func gateConfig(cfg Config) Config {
	cfg.Account = AccountConfig{RequestsPerMinute: unbounded, MaxInFlight: unbounded, ExpectedReplicas: cfg.Account.ExpectedReplicas}
	return cfg
}

// poolCaps are the caps the pools decide themselves: none behind a gate.
func poolCaps(gate bool, caps map[string]callerCap) map[string]callerCap {
	if gate {
		return nil
	}
	return caps
}

// newGate returns the gate's limiter under cfg.
func (a *Admitter) newGate(cfg Config, caps map[string]callerCap) *limiter {
	g := a.newLimiter(gateConfig(cfg), capsPool, caps)
	g.prefetch = false // every request through it is capped: no credits
	return g
}

// setGateLocked creates, reconfigures or removes the gate for cfg and
// caps (a.mu held). A gate that goes (no more pools, or caps) refuses its
// waiters with ErrPoolRemoved: retried, they are admitted under the
// account's own caps.
func (a *Admitter) setGateLocked(cfg Config, caps map[string]callerCap) {
	switch want := gated(cfg, caps); {
	case want && a.gate == nil:
		a.gate = &poolRun{l: a.newGate(cfg, caps)}
		a.startLocked(a.gate)
	case want:
		gc := gateConfig(cfg)
		a.gate.l.Reconfigure(gc, gc.Enforced(), caps)
	case a.gate != nil:
		a.gate.l.closeWith(ErrPoolRemoved)
		if a.gate.stop != nil {
			a.gate.stop()
		}
		a.gate = nil
	}
}

// admitGated admits req through gate, then its pool l: the cap's slot
// first, then the pool within what is left of the class's max_wait.
func admitGated(ctx context.Context, gate, l *limiter, req Request) (*Lease, error) {
	req.until = time.Now().Add(l.maxWait(req.Class))
	slot, err := gate.Admit(ctx, Request{Class: req.Class, Caller: req.Caller})
	if err != nil {
		return nil, err
	}
	lease, err := l.Admit(ctx, req)
	if err != nil {
		slot.Release()
		return nil, err
	}
	lease.gate = slot
	return lease, nil
}

// capped reports whether caller has a cap here.
func (l *limiter) capped(caller string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.capOfLocked(caller) != nil
}

// maxWait is class c's max_wait.
func (l *limiter) maxWait(c classify.Class) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.classes[c].maxWait
}
