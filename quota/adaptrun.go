package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/store"
)

// adaptiveRun steps one pool's adaptive in-flight bound on this replica:
// every store.AdaptInterval it hands the pool's store.AdaptStore what the leases
// measured since the last time (adaptLedger), steps the controller
// (adaptive.Limits.next) when the store says this replica is to, and puts
// the bound the store holds in force (limiter.setBound). Its zero value
// does nothing; newLimiter wires it. tick runs on one goroutine; view and
// decisions are safe for concurrent use.
type adaptiveRun struct {
	store store.AdaptStore
	pool  string
	// log names the pool in every line (poolLogAttrs).
	log    *slog.Logger
	ledger *adaptLedger
	limits *atomic.Pointer[limitSet]
	// setBound puts a bound in force (the limiter's).
	setBound func(int64)
	// bound is the last bound put in force; 0 before the first.
	bound atomic.Int64
	// now reads the clock the leases' times follow.
	now func() time.Time
	// add is the adds' numbering; tick's only.
	add adaptAdds
	// turnedOn wakes run when a reload gives the pool an adaptive bound
	// (limiter.Reconfigure); nil in a zero adaptiveRun.
	turnedOn chan struct{}
	adaptSeen
}

// adaptSeen is what an adaptiveRun's ticks leave for its readers:
// last, the store's view as of the last tick, and decisions, this
// replica's steps by action; mu guards both.
type adaptSeen struct {
	mu        sync.Mutex
	last      store.AdaptView
	decisions map[adaptive.Action]int64
}

// adaptIdleInterval is how often a pool without an adaptive bound drops
// what its leases measured (its counts, summed, must not grow without
// bound): an idle replica's pools do not wake every AdaptInterval for
// nothing. A reload that gives the pool a bound wakes it at once
// (turnedOn).
const adaptIdleInterval = time.Minute

// interval is how long run waits for the next tick: AdaptInterval while
// the pool has an adaptive bound, adaptIdleInterval while it has none.
func (r *adaptiveRun) interval() time.Duration {
	if r.limits.Load().adaptive == nil {
		return adaptIdleInterval
	}
	return store.AdaptInterval
}

// adaptAdds numbers a replica's adds to the adaptive store: seq numbers
// them (store.AdaptCounts.Seq); pending is an add whose reply did not
// come, sent again, unchanged, before any other.
type adaptAdds struct {
	seq     uint64
	pending *store.AdaptCounts
}

// run ticks every interval until ctx ends. When a reload turns the
// pool's bound on, what the leases measured while it was off is dropped
// (no sample of the bound now in force) and the ticks go at
// store.AdaptInterval from then.
func (r *adaptiveRun) run(ctx context.Context) {
	t := time.NewTimer(r.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.turnedOn:
			r.ledger.take(r.now())
		case <-t.C:
			r.tick(ctx)
		}
		t.Reset(r.interval())
	}
}

// tick is one interval: report, step if the store says so, apply the
// bound. A pool without an adaptive bound only drops its counts. A failed
// store call keeps the bound in force, and its add is sent again as it
// was at the next tick — it may have reached the store, whose answer was
// lost, and the store counts an add once by its Seq — while the leases'
// new counts wait in the ledger.
func (r *adaptiveRun) tick(ctx context.Context) {
	set := r.limits.Load()
	counts := r.add.pending
	if counts == nil {
		c := r.ledger.take(r.now())
		r.add.seq++
		c.Seq = r.add.seq
		counts = &c
	}
	r.add.pending = nil
	if set.adaptive == nil || r.store == nil {
		return
	}
	lim := *set.adaptive
	ans, err := r.store.Add(ctx, r.pool, *counts)
	if err != nil {
		r.add.pending = counts
		if ctx.Err() == nil && !errors.Is(err, store.ErrAdaptBypassed) {
			r.log.Warn("adaptive_store_failed", slog.String("error", err.Error()))
		}
		return
	}
	view := ans.View
	if ans.Step {
		view = r.step(ctx, lim, view, ans)
	}
	r.mu.Lock()
	r.last = view
	r.mu.Unlock()
	r.setBound(int64(view.State.Bound)) // 0 before the first step: the floor
}

// step runs the controller on the fleet's sample and stores its new view;
// it returns the view in force afterwards — the old one when another
// replica took the lease meanwhile.
func (r *adaptiveRun) step(ctx context.Context, lim adaptive.Limits, v store.AdaptView, ans store.AdaptAnswer) store.AdaptView {
	c := ans.Sample
	m := adaptive.Sample{Bound: v.State.Bound, Saturated: c.Saturated, Completed: int(c.Completed), Work: float64(c.Work),
		Elapsed: ans.Elapsed, Latency: c.Latency, Busy: c.Busy, Failures: int(c.Failures), Throttled: int(c.Throttled)}
	s, d := lim.Next(v.State, m)
	next := store.AdaptView{State: s, Last: d, Judged: v.Judged}
	if d.Judged != (adaptive.Rate{}) {
		next.Judged = d.Judged
	}
	if ok, err := r.store.Commit(ctx, r.pool, next); err != nil || !ok {
		return v
	}
	r.mu.Lock()
	if r.decisions == nil {
		r.decisions = map[adaptive.Action]int64{}
	}
	r.decisions[d.Action]++
	r.mu.Unlock()
	if d.Large() {
		r.log.Info("adaptive_bound_moved", slog.String("action", string(d.Action)),
			slog.Int("from", d.From), slog.Int("to", d.To), slog.String("why", d.Why))
	}
	return next
}

// view returns the store's view as of the last tick and this replica's
// decisions by action.
func (r *adaptiveRun) view() (store.AdaptView, map[adaptive.Action]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := make(map[adaptive.Action]int64, len(r.decisions))
	for a, n := range r.decisions {
		counts[a] = n
	}
	return r.last, counts
}
