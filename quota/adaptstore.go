package quota

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive"
)

// adaptInterval is how often each replica reports a pool's measurement to
// its adaptStore, and the least time between two steps of the pool's
// adaptive bound: a sample of 2 s holds about 80 completions at 40 a
// second, and several intervals add up to one measurement (adaptMeasure).
const adaptInterval = 2 * time.Second

// adaptStepGap is the least time between two steps: an interval less a
// tenth, so that a tick that comes a little early — a ticker's jitter, a
// store call that was slow the time before — steps on time rather than an
// interval late (a step every 4 s where 2 s was meant, at 2 s a request a
// third of the time to grow).
const adaptStepGap = adaptInterval - adaptInterval/10

// adaptLeaseTTL is how long the replica that steps a pool's bound holds
// the right to, renewed with each of its calls: three intervals, so one
// slow call does not hand it over, and a replica killed -9 leaves the
// bound unstepped for at most that long.
const adaptLeaseTTL = 3 * adaptInterval

// adaptStore keeps each pool's adaptive bound for the fleet: the
// controller's state (adaptView), the counts the replicas add, and which
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
// after adaptLeaseTTL the next replica to call steps from the stored state.
type adaptStore interface {
	// add adds one replica's counts since its last call to pool's
	// accumulators and answers the pool's stored view. When the caller is
	// to step the bound — it holds the lease (in process: always) and
	// adaptStepGap has passed since the last step — the answer carries
	// the sample accumulated since then, which the store resets. An add
	// retried with the same c.Seq (its reply was lost) adds nothing again,
	// and is handed again the step its first call was handed, if any.
	add(ctx context.Context, pool string, c adaptCounts) (adaptAnswer, error)
	// commit stores the view a step produced, if the caller still holds
	// the lease; it reports whether it did.
	commit(ctx context.Context, pool string, v adaptView) (bool, error)
}

// adaptAnswer is an adaptStore's answer to add.
type adaptAnswer struct {
	// View is the pool's stored view; zero before its first step.
	View adaptView
	// Step says the caller is to step the bound with Sample, the fleet's
	// counts over Elapsed since the last step (saturated when any replica
	// found the bound binding). Elapsed is 0 at the first step.
	Step    bool
	Sample  adaptCounts
	Elapsed time.Duration
}

// adaptView is what the store keeps of a pool's adaptive bound, as JSON:
// the controller's state, its last decision and the last measurement it
// judged (for metrics and /admin/state).
type adaptView struct {
	State  adaptive.State    `json:"state"`
	Last   adaptive.Decision `json:"last"`
	Judged adaptive.Rate     `json:"judged"`
}

// errAdaptBypassed is the answer of a shared adaptStore while the store
// is bypassed (store.on_error): the replica keeps its last bound.
var errAdaptBypassed = errors.New("quota: adaptive bound: shared store bypassed")

var _ adaptStore = (*memAdaptStore)(nil)

// memAdaptStore is the in-process adaptStore: one replica's bounds, lost
// with it, and no lease — the one replica always steps. No answer of it
// is ever lost, so it reads no Seq. Its zero value is not usable; call
// newMemAdaptStore.
type memAdaptStore struct {
	now func() time.Time

	mu    sync.Mutex
	pools map[string]*memAdaptPool
}

// memAdaptPool is one pool's entry: the counts since the last step, its
// time, and the view.
type memAdaptPool struct {
	acc  adaptCounts
	last time.Time
	view adaptView
}

// newMemAdaptStore returns an in-process store reading the time from now
// (time.Now when nil).
func newMemAdaptStore(now func() time.Time) *memAdaptStore {
	if now == nil {
		now = time.Now
	}
	return &memAdaptStore{now: now, pools: map[string]*memAdaptPool{}}
}

// add implements adaptStore.
func (m *memAdaptStore) add(_ context.Context, pool string, c adaptCounts) (adaptAnswer, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[pool]
	if p == nil {
		p = &memAdaptPool{}
		m.pools[pool] = p
	}
	p.acc = p.acc.plus(c)
	ans := adaptAnswer{View: p.view}
	if p.last.IsZero() || now.Sub(p.last) >= adaptStepGap {
		ans.Step, ans.Sample = true, p.acc
		if !p.last.IsZero() {
			ans.Elapsed = now.Sub(p.last)
		}
		p.acc, p.last = adaptCounts{}, now
	}
	return ans, nil
}

// commit implements adaptStore.
func (m *memAdaptStore) commit(_ context.Context, pool string, v adaptView) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[pool]; p != nil {
		p.view = v
		return true, nil
	}
	return false, nil
}

// plus is c with d's counts added; saturated when either is.
func (c adaptCounts) plus(d adaptCounts) adaptCounts {
	return adaptCounts{Completed: c.Completed + d.Completed, Failures: c.Failures + d.Failures, Throttled: c.Throttled + d.Throttled,
		Work: c.Work + d.Work, Latency: c.Latency + d.Latency, Busy: c.Busy + d.Busy, Saturated: c.Saturated || d.Saturated}
}

var _ adaptStore = failoverAdaptStore{}

// failoverAdaptStore is the shared adaptStore behind the pools' breaker:
// while Redis is bypassed it answers errAdaptBypassed, and the replica
// keeps the last bound (its share of it under store.on_error local, as
// the limiter derives).
type failoverAdaptStore struct {
	primary adaptStore
	f       *failoverStore
}

// add implements adaptStore.
func (s failoverAdaptStore) add(ctx context.Context, pool string, c adaptCounts) (adaptAnswer, error) {
	var ans adaptAnswer
	if done, err := s.f.callPrimary(ctx, func(ctx context.Context) (err error) {
		ans, err = s.primary.add(ctx, pool, c)
		return err
	}); done {
		return ans, err
	}
	return adaptAnswer{}, errAdaptBypassed
}

// commit implements adaptStore.
func (s failoverAdaptStore) commit(ctx context.Context, pool string, v adaptView) (bool, error) {
	var ok bool
	if done, err := s.f.callPrimary(ctx, func(ctx context.Context) (err error) {
		ok, err = s.primary.commit(ctx, pool, v)
		return err
	}); done {
		return ok, err
	}
	return false, errAdaptBypassed
}
