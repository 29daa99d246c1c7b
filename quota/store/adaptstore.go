package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive"
)

// AdaptInterval is how often each replica reports a pool's measurement to
// its AdaptStore, and the least time between two steps of the pool's
// adaptive bound: a sample of 2 s holds about 80 completions at 40 a
// second, and several intervals add up to one measurement (adaptMeasure).
const AdaptInterval = 2 * time.Second

// adaptStepGap is the least time between two steps: an interval less a
// tenth, so that a tick that comes a little early — a ticker's jitter, a
// store call that was slow the time before — steps on time rather than an
// interval late (a step every 4 s where 2 s was meant, at 2 s a request a
// third of the time to grow).
const adaptStepGap = AdaptInterval - AdaptInterval/10

// AdaptLeaseTTL is how long the replica that steps a pool's bound holds
// the right to, renewed with each of its calls: three intervals, so one
// slow call does not hand it over, and a replica killed -9 leaves the
// bound unstepped for at most that long.
const AdaptLeaseTTL = 3 * AdaptInterval

// AdaptStore keeps each pool's adaptive bound for the fleet: the
// controller's state (AdaptView), the counts the replicas add, and which
// replica steps it. Safe for concurrent use.
//
// Why this shape — the state in the store, stepped in Go by the one
// replica holding a lease — rather than the controller in Lua: the
// controller (package quota/adaptive) is a pure Go value with its own tests on a
// simulated server; written again in Lua it would be a second copy to keep
// equal, in doubles cjson rounds to 14 digits. Stepping it once per
// interval needs no atomicity with admission, only that one replica does
// it at a time and that the state survives the replica: the lease gives
// the first, the store the second. A holder that dies stops renewing, and
// after AdaptLeaseTTL the next replica to call steps from the stored state.
type AdaptStore interface {
	// Add adds one replica's counts since its last call to pool's
	// accumulators and answers the pool's stored view. When the caller is
	// to step the bound — it holds the lease (in process: always) and
	// adaptStepGap has passed since the last step — the answer carries
	// the sample accumulated since then, which the store resets. An add
	// retried with the same c.Seq (its reply was lost) adds nothing again,
	// and is handed again the step its first call was handed, if any.
	Add(ctx context.Context, pool string, c AdaptCounts) (AdaptAnswer, error)
	// Commit stores the view a step produced, if the caller still holds
	// the lease; it reports whether it did.
	Commit(ctx context.Context, pool string, v AdaptView) (bool, error)
}

// AdaptAnswer is an AdaptStore's answer to add.
type AdaptAnswer struct {
	// View is the pool's stored view; zero before its first step.
	View AdaptView
	// Step says the caller is to step the bound with Sample, the fleet's
	// counts over Elapsed since the last step (saturated when any replica
	// found the bound binding). Elapsed is 0 at the first step.
	Step    bool
	Sample  AdaptCounts
	Elapsed time.Duration
}

// AdaptView is what the store keeps of a pool's adaptive bound, as JSON:
// the controller's state, its last decision and the last measurement it
// judged (for metrics and /admin/state).
type AdaptView struct {
	State  adaptive.State    `json:"state"`
	Last   adaptive.Decision `json:"last"`
	Judged adaptive.Rate     `json:"judged"`
}

// ErrAdaptBypassed is the answer of a shared AdaptStore while the store
// is bypassed (store.on_error): the replica keeps its last bound.
var ErrAdaptBypassed = errors.New("quota: adaptive bound: shared store bypassed")

var _ AdaptStore = (*MemoryAdapt)(nil)

// MemoryAdapt is the in-process AdaptStore: one replica's bounds, lost
// with it, and no lease — the one replica always steps. No answer of it
// is ever lost, so it reads no Seq. Its zero value is not usable; call
// NewMemoryAdapt.
type MemoryAdapt struct {
	now func() time.Time

	mu    sync.Mutex
	pools map[string]*memAdaptPool
}

// memAdaptPool is one pool's entry: the counts since the last step, its
// time, and the view.
type memAdaptPool struct {
	acc  AdaptCounts
	last time.Time
	view AdaptView
}

// NewMemoryAdapt returns an in-process store reading the time from now
// (time.Now when nil).
func NewMemoryAdapt(now func() time.Time) *MemoryAdapt {
	if now == nil {
		now = time.Now
	}
	return &MemoryAdapt{now: now, pools: map[string]*memAdaptPool{}}
}

// Add implements AdaptStore.
func (m *MemoryAdapt) Add(_ context.Context, pool string, c AdaptCounts) (AdaptAnswer, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[pool]
	if p == nil {
		p = &memAdaptPool{}
		m.pools[pool] = p
	}
	p.acc = p.acc.Plus(c)
	ans := AdaptAnswer{View: p.view}
	if p.last.IsZero() || now.Sub(p.last) >= adaptStepGap {
		ans.Step, ans.Sample = true, p.acc
		if !p.last.IsZero() {
			ans.Elapsed = now.Sub(p.last)
		}
		p.acc, p.last = AdaptCounts{}, now
	}
	return ans, nil
}

// Commit implements AdaptStore.
func (m *MemoryAdapt) Commit(_ context.Context, pool string, v AdaptView) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[pool]; p != nil {
		p.view = v
		return true, nil
	}
	return false, nil
}

// Plus is c with d's counts added; saturated when either is.
func (c AdaptCounts) Plus(d AdaptCounts) AdaptCounts {
	return AdaptCounts{Completed: c.Completed + d.Completed, Failures: c.Failures + d.Failures, Throttled: c.Throttled + d.Throttled,
		Work: c.Work + d.Work, Latency: c.Latency + d.Latency, Busy: c.Busy + d.Busy, Saturated: c.Saturated || d.Saturated}
}

var _ AdaptStore = FailoverAdapt{}

// NewFailoverAdapt returns primary behind f's breaker and
// store.on_error policy.
func NewFailoverAdapt(primary AdaptStore, f *Failover) FailoverAdapt {
	return FailoverAdapt{primary: primary, f: f}
}

// FailoverAdapt is the shared AdaptStore behind the pools' breaker:
// while Redis is bypassed it answers ErrAdaptBypassed, and the replica
// keeps the last bound (its share of it under store.on_error local, as
// the limiter derives).
type FailoverAdapt struct {
	primary AdaptStore
	f       *Failover
}

// Add implements AdaptStore.
func (s FailoverAdapt) Add(ctx context.Context, pool string, c AdaptCounts) (AdaptAnswer, error) {
	var ans AdaptAnswer
	if done, err := s.f.Call(ctx, func(ctx context.Context) (err error) {
		ans, err = s.primary.Add(ctx, pool, c)
		return err
	}); done {
		return ans, err
	}
	return AdaptAnswer{}, ErrAdaptBypassed
}

// Commit implements AdaptStore.
func (s FailoverAdapt) Commit(ctx context.Context, pool string, v AdaptView) (bool, error) {
	var ok bool
	if done, err := s.f.Call(ctx, func(ctx context.Context) (err error) {
		ok, err = s.primary.Commit(ctx, pool, v)
		return err
	}); done {
		return ok, err
	}
	return false, ErrAdaptBypassed
}

// AdaptCounts are one replica's adaptLedger taken at once: what it adds
// to the pool's sample in the store.
type AdaptCounts struct {
	Completed, Failures, Throttled int64
	Work                           int64
	Latency                        time.Duration
	// Busy is the time leases were in flight, summed over them: its
	// ratio to the interval is the mean number in flight.
	Busy      time.Duration
	Saturated bool
	// Seq numbers a replica's adds of counts (adaptiveRun's, from 1): an
	// add retried after its reply was lost carries the same Seq, and the
	// store counts it once. 0 is never taken for a retry. Not a count:
	// plus leaves it 0.
	Seq uint64
}
