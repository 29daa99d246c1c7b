package quota

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/adaptive/adaptivetest"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// adaptiveConfig is the knee pool: adaptive between the default
// floor and 200, with bulk's default share.
func adaptiveConfig() Config {
	cfg := DefaultConfig()
	cfg.Account.AdaptiveInFlight = true
	return cfg
}

// knee8 is the knee server, as adaptive's tests run it: 8 slots
// at 200 ms, 60 bulk workers.
var knee8 = adaptivetest.Config{Slots: 8, Service: 200 * time.Millisecond, Workers: 60, Seed: 3}

// feed adds sample m to l's ledger as its leases would have.
func feed(l *limiter, m adaptive.Sample) {
	l.leases.adapt.add(store.AdaptCounts{Completed: int64(m.Completed), Work: int64(m.Work), Latency: m.Latency,
		Failures: int64(m.Failures), Throttled: int64(m.Throttled), Saturated: m.Saturated})
}

// TestAdaptiveRunInProcess: the in-process wiring — a limiter's ledger
// sampled every store.AdaptInterval by an injected clock, stepped through the
// in-process store, the bound put in force as the pool's limits — moves
// the bound from the floor to the knee of the simulated 8-slot server
// and keeps it there, with bulk's and the reserve's in-flight limits
// derived from the bound as from max_in_flight.
func TestAdaptiveRunInProcess(t *testing.T) {
	cfg := adaptiveConfig()
	now := time.Unix(1_700_000_000, 0)
	l := newLimiter(cfg, cfg.Enforced(), store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
	l.adapt.store = store.NewMemoryAdapt(func() time.Time { return now })
	if got := l.InFlightLimit(); got != adaptive.DefaultMinInFlight {
		t.Fatalf("before the first step the bound is %d, want the floor %d", got, adaptive.DefaultMinInFlight)
	}
	if got := l.inFlightCeiling(); got != 200 {
		t.Fatalf("ceiling %d, want max_in_flight 200", got)
	}
	srv := adaptivetest.NewServer(knee8)
	var bounds []int64
	for now.Sub(time.Unix(1_700_000_000, 0)) < 85*time.Second {
		l.adapt.tick(t.Context())
		bound := l.InFlightLimit()
		bounds = append(bounds, bound)
		feed(l, adaptive.Sample(srv.Run(int(bound), store.AdaptInterval)))
		now = now.Add(store.AdaptInterval)
	}
	t.Logf("bounds every 2 s: %v", bounds)
	for i, b := range bounds[13:] { // after 26 s
		if b < 8 || b > 16 {
			t.Fatalf("bound %d at %d s, want within [8, 16]", b, 2*(i+13))
		}
	}
	lim := l.limits.Load().enforced
	want := cfg.Classes.withInFlight(cfg.Enforced(), lim.InFlight)
	if lim != want {
		t.Errorf("limits under bound %d = %+v, want %+v", lim.InFlight, lim, want)
	}
	view, decisions := l.adapt.view()
	if view.State.Bound != int(lim.InFlight) || decisions[adaptive.ActGrow] == 0 || view.Judged.Work == 0 {
		t.Errorf("view %+v, decisions %v: want the bound in force, grows counted and a judged measurement", view, decisions)
	}
}

// TestAdaptiveRunOff: a pool without adaptive_in_flight keeps
// max_in_flight whatever its leases measure, and a reload that turns it
// on starts at the floor.
func TestAdaptiveRunOff(t *testing.T) {
	cfg := DefaultConfig()
	now := time.Unix(1_700_000_000, 0)
	l := newLimiter(cfg, cfg.Enforced(), store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
	l.adapt.store = store.NewMemoryAdapt(func() time.Time { return now })
	srv := adaptivetest.NewServer(knee8)
	for range 10 {
		l.adapt.tick(t.Context())
		feed(l, adaptive.Sample(srv.Run(int(l.InFlightLimit()), store.AdaptInterval)))
		now = now.Add(store.AdaptInterval)
	}
	if got := l.InFlightLimit(); got != 200 {
		t.Fatalf("bound %d without adaptive_in_flight, want 200", got)
	}
	on := adaptiveConfig()
	l.Reconfigure(on, on.Enforced())
	if got := l.InFlightLimit(); got != adaptive.DefaultMinInFlight {
		t.Fatalf("bound %d after turning adaptive on, want the floor", got)
	}
}

// testRedisAdapt is a store.RedisAdapt on srv under prefix as replica,
// reading the time from *now.
func testRedisAdapt(t *testing.T, srv *redistest.Server, prefix, replica string, now *time.Time) *store.RedisAdapt {
	s := store.NewRedisAdapt(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second}, replica)
	s.Clock = func() time.Time { return *now }
	return s
}

// TestRedisAdaptStore: two replicas add their counts to one pool; the
// first to call holds the lease and steps, with the fleet's counts since
// the last step; the other sees the bound it stored and never steps. When
// the holder stops calling, after the lease's TTL (by the script's clock)
// the other takes over and steps from the stored state. Every key is
// under the pool's hash tag and has a TTL.
func TestRedisAdaptStore(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	now := time.Unix(1_700_000_000, 0)
	a, b := testRedisAdapt(t, srv, prefix, "a", &now), testRedisAdapt(t, srv, prefix, "b", &now)
	lim := adaptive.Limits{Ceiling: 200}
	ctx := t.Context()
	add := func(s store.AdaptStore, c store.AdaptCounts) store.AdaptAnswer {
		t.Helper()
		ans, err := s.Add(ctx, "llama", c)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	step := func(s store.AdaptStore, ans store.AdaptAnswer) store.AdaptView {
		t.Helper()
		m := adaptive.Sample{Bound: ans.View.State.Bound, Saturated: ans.Sample.Saturated, Completed: int(ans.Sample.Completed),
			Elapsed: ans.Elapsed, Latency: ans.Sample.Latency}
		st, d := lim.Next(ans.View.State, m)
		v := store.AdaptView{State: st, Last: d}
		if ok, err := s.Commit(ctx, "llama", v); err != nil || !ok {
			t.Fatalf("commit: %v, %v", ok, err)
		}
		return v
	}
	first := add(a, store.AdaptCounts{})
	if !first.Step || first.Elapsed != 0 {
		t.Fatalf("first call: %+v, want a step at elapsed 0", first)
	}
	v := step(a, first)
	if ans := add(b, store.AdaptCounts{Completed: 30, Latency: 6 * time.Second, Saturated: true}); ans.Step || ans.View.State != v.State {
		t.Fatalf("b: %+v; want no step and a's state", ans)
	}
	now = now.Add(store.AdaptInterval)
	ans := add(a, store.AdaptCounts{Completed: 50, Work: 7, Latency: 10 * time.Second, Failures: 1, Throttled: 2})
	want := store.AdaptCounts{Completed: 80, Work: 7, Latency: 16 * time.Second, Failures: 1, Throttled: 2, Saturated: true}
	if !ans.Step || ans.Sample != want || ans.Elapsed != store.AdaptInterval {
		t.Fatalf("a after an interval: %+v; want a step with %+v over %s", ans, want, store.AdaptInterval)
	}
	v = step(a, ans)
	if ok, err := b.Commit(ctx, "llama", store.AdaptView{}); err != nil || ok {
		t.Fatalf("b's commit without the lease: %v, %v; want refused", ok, err)
	}
	// a is killed: b calls on, and steps once a's lease ran out.
	for now = now.Add(store.AdaptInterval); ; now = now.Add(store.AdaptInterval) {
		ans := add(b, store.AdaptCounts{Completed: 40, Latency: 8 * time.Second, Saturated: true})
		if !ans.Step {
			if ans.View.State != v.State {
				t.Fatalf("b before the takeover sees %+v, want %+v", ans.View.State, v.State)
			}
			continue
		}
		if held := now.Sub(time.Unix(1_700_000_000, 0)) - store.AdaptInterval; held < store.AdaptLeaseTTL {
			t.Fatalf("b stepped %s after a's last call, before its lease of %s ran out", held, store.AdaptLeaseTTL)
		}
		if ans.View.State != v.State || ans.Sample.Completed < 40 {
			t.Fatalf("takeover: %+v; want a's stored state and b's counts", ans)
		}
		step(b, ans)
		break
	}
	if ok, err := a.Commit(ctx, "llama", store.AdaptView{}); err != nil || ok {
		t.Fatalf("a's commit after losing the lease: %v, %v; want refused", ok, err)
	}
	c := srv.Client(t)
	keys, err := c.Keys(ctx, store.PoolTag(prefix, "llama")+"*").Result()
	if err != nil || len(keys) != 1 || keys[0] != store.AdaptKey(prefix, "llama") {
		t.Fatalf("keys %v (%v), want only %s", keys, err, store.AdaptKey(prefix, "llama"))
	}
	if ttl := c.PTTL(ctx, keys[0]).Val(); ttl <= 0 {
		t.Errorf("%s has no TTL (%s)", keys[0], ttl)
	}
}

// lossyAdaptStore is a store.AdaptStore whose next lose calls to add reach the
// store but whose replies are lost: the caller gets an error, as from a
// reply that stalled past store.timeout. It records the samples of the
// step answers it passed on.
type lossyAdaptStore struct {
	store.AdaptStore
	lose  int
	steps []store.AdaptCounts
}

// add implements store.AdaptStore.
func (s *lossyAdaptStore) Add(ctx context.Context, pool string, c store.AdaptCounts) (store.AdaptAnswer, error) {
	ans, err := s.AdaptStore.Add(ctx, pool, c)
	if err == nil && s.lose > 0 {
		s.lose--
		return store.AdaptAnswer{}, errors.New("reply lost")
	}
	if err == nil && ans.Step {
		s.steps = append(s.steps, ans.Sample)
	}
	return ans, err
}

// TestAdaptRunLostReplies: on a fleet's Redis, a replica whose add reached
// Redis but whose reply was lost retries it, and the counts arrive once
// and only once: a retried add counts once (doubled 429s would be a false
// back-off), and a step whose reply was lost hands the same sample to the
// retry (the fleet's counts it had reset are not dropped). Every count the
// replicas added reaches the stepping replica exactly once. Each replica's
// last seq is a key of its own under the pool's hash tag, with a TTL.
func TestAdaptRunLostReplies(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	now := time.Unix(1_700_000_000, 0)
	cfg := adaptiveConfig()
	l := newLimiter(cfg, cfg.Enforced(), store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
	lossy := &lossyAdaptStore{AdaptStore: testRedisAdapt(t, srv, prefix, "a", &now)}
	l.adapt.store, l.adapt.pool = lossy, "llama"
	b := testRedisAdapt(t, srv, prefix, "b", &now)
	var seqB uint64
	addB := func(c store.AdaptCounts) {
		t.Helper()
		seqB++
		c.Seq = seqB
		if _, err := b.Add(t.Context(), "llama", c); err != nil {
			t.Fatal(err)
		}
	}
	l.adapt.tick(t.Context()) // the first step, at elapsed 0
	fed := store.AdaptCounts{}
	feedA := func(c store.AdaptCounts) {
		l.leases.adapt.add(c)
		fed = fed.Plus(c)
	}
	// An add whose reply is lost, between steps.
	feedA(store.AdaptCounts{Completed: 30, Throttled: 3, Latency: 6 * time.Second, Saturated: true})
	now = now.Add(time.Second)
	lossy.lose = 1
	l.adapt.tick(t.Context())
	addB(store.AdaptCounts{Completed: 40, Latency: 8 * time.Second})
	fed = fed.Plus(store.AdaptCounts{Completed: 40, Latency: 8 * time.Second})
	now = now.Add(time.Second)
	l.adapt.tick(t.Context()) // the retry, and a step
	// A step whose reply is lost.
	feedA(store.AdaptCounts{Completed: 20, Latency: 4 * time.Second})
	addB(store.AdaptCounts{Completed: 10, Failures: 1, Latency: 2 * time.Second})
	fed = fed.Plus(store.AdaptCounts{Completed: 10, Failures: 1, Latency: 2 * time.Second})
	now = now.Add(store.AdaptInterval)
	lossy.lose = 1
	l.adapt.tick(t.Context())
	now = now.Add(store.AdaptInterval)
	l.adapt.tick(t.Context()) // the retry
	now = now.Add(store.AdaptInterval)
	l.adapt.tick(t.Context()) // whatever is left
	var got store.AdaptCounts
	for _, s := range lossy.steps {
		got = got.Plus(s)
	}
	if got != fed {
		t.Errorf("the steps were handed %+v in all (%d steps: %+v), want what was added, once: %+v", got, len(lossy.steps), lossy.steps, fed)
	}
	c := srv.Client(t)
	keys, err := c.Keys(t.Context(), store.PoolTag(prefix, "llama")+"*").Result()
	if err != nil || len(keys) != 3 { // the pool's hash and each replica's last seq
		t.Fatalf("keys %v (%v), want the adapt hash and two seq keys", keys, err)
	}
	for _, k := range keys {
		if ttl := c.PTTL(t.Context(), k).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%s)", k, ttl)
		}
	}
}
