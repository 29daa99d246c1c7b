package store

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// newTestRedisStore returns a Redis on its own key prefix, with a 1 s
// heartbeat and a generous timeout (the race detector slows calls).
func newTestRedisStore(t testing.TB, srv *redistest.Server, prefix string) *Redis {
	t.Helper()
	return NewRedis(srv.Client(t), Config{KeyPrefix: prefix, Timeout: 2 * time.Second, Heartbeat: time.Second})
}

// TestRedisWindowsFollowRedisTime: windows are keyed by Redis TIME, never
// a replica's clock, so replicas whose clocks disagree share every window.
func TestRedisWindowsFollowRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	l := Limits{AccountRPM: 60, BulkRPM: 60, InFlight: 100, BulkInFlight: 100} // one a second
	a := newTestRedisStore(t, srv, prefix)
	b := newTestRedisStore(t, srv, prefix)
	c := srv.Client(t)
	ctx := t.Context()
	for attempt := 0; ; attempt++ {
		before, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ra, secA, errA := a.take(ctx, TakeRequest{Want: pc(1, 0), Limits: l})
		rb, secB, errB := b.take(ctx, TakeRequest{Want: pc(1, 0), Limits: l})
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if secA != secB || secA != before.Unix() {
			if attempt > 5 {
				t.Fatalf("the calls never fell in one Redis second")
			}
			continue // a second boundary fell between the calls; try again
		}
		if ra.Granted[0]+rb.Granted[0] != 1 {
			t.Fatalf("second %d: replica A got %d, B got %d; one shared window admits exactly 1", secA, ra.Granted[0], rb.Granted[0])
		}
		return
	}
}

// TestRedisReplicaExpiry: a replica that stops calling (a crash) stops
// counting once its heartbeat TTL passes; the others then get its slots.
func TestRedisReplicaExpiry(t *testing.T) {
	l := inFlightLimits
	dead, live, advance := expiringPair(t)
	ctx := t.Context()
	if r, _ := dead.Take(ctx, TakeRequest{Want: pc(10, 0), Limits: l}); r.Granted != pc(10, 0) {
		t.Fatalf("dead replica got %v", r.Granted)
	}
	advance(2 * time.Second) // within 3 heartbeats: still counted
	if r, _ := live.Take(ctx, TakeRequest{Want: pc(1, 0), Limits: l}); r.Granted != pc(0, 0) || r.FleetInFlight != pc(10, 0) {
		t.Fatalf("before expiry: live got %v, fleet %v; want nothing, fleet 10", r.Granted, r.FleetInFlight)
	}
	advance(2 * time.Second) // 4 s of silence > 3 s TTL
	if r, _ := live.Take(ctx, TakeRequest{Want: pc(10, 0), Limits: l}); r.Granted != pc(10, 0) || r.FleetInFlight != pc(10, 0) {
		t.Fatalf("after expiry: live got %v, fleet %v; want all 10", r.Granted, r.FleetInFlight)
	}
}

// expiringPair is two replicas' stores on one Redis and one fake clock,
// for a replica that dies (dead) and one that goes on (live); advance
// moves the clock. The clock starts at a fixed instant.
func expiringPair(t *testing.T) (dead, live *Redis, advance func(time.Duration)) {
	t.Helper()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	dead, live = newTestRedisStore(t, srv, prefix), newTestRedisStore(t, srv, prefix)
	dead.clock, live.clock = clock, clock
	return dead, live, func(d time.Duration) { now = now.Add(d) }
}

// TestRedisScriptFlush: SCRIPT FLUSH costs a reload, not an error.
func TestRedisScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestRedisStore(t, srv, redistest.Prefix(t))
	ctx := t.Context()
	if _, err := s.Take(ctx, TakeRequest{Want: pc(1, 0), Limits: windowLimits}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, TakeRequest{Want: pc(1, 0), Limits: windowLimits}); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
}

// TestRedisKeyHygiene: after heavy use every key has a TTL and there are
// as many keys as the store names, however many requests went through.
func TestRedisKeyHygiene(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	s := newTestRedisStore(t, srv, prefix)
	ctx := t.Context()
	for i := range 500 {
		req := TakeRequest{Want: pc(int64(i%3), int64(i%5)), InFlight: pc(int64(i%7), 0), Limits: windowLimits}
		if _, err := s.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	c := srv.Client(t)
	keys, err := c.Keys(ctx, "{"+prefix+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 || len(keys) > len(s.Keys(AccountPool)) {
		t.Fatalf("keys %v, want at most %d", keys, len(s.Keys(AccountPool)))
	}
	for _, k := range keys {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%s)", k, ttl)
		}
	}
}

// TestFailoverStore: Redis down → local limits at once, degraded, no error;
// back → Redis again. Under "closed", ErrStoreUnavailable.
func TestFailoverStore(t *testing.T) {
	srv := redistest.Start(t)
	if !srv.Owned() {
		t.Skip("needs a redis-server it may kill; REDIS_URL points at a shared one")
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	primary := NewRedis(client, Config{KeyPrefix: redistest.Prefix(t), Timeout: 200 * time.Millisecond, Heartbeat: time.Second})
	local := NewMemory(nil)
	// Every call carries the fleet's limits and the per-replica fallback's.
	lims := TakeRequest{Limits: windowLimits, LocalLimits: Limits{AccountRPM: 60, InFlight: 5, BulkInFlight: 1}}
	want := func(i, b int64) TakeRequest { r := lims; r.Want = pc(i, b); return r }
	ping := func(ctx context.Context) error { return client.Ping(ctx).Err() }
	logs := &runtest.Buffer{}
	fs := NewFailover(primary, local, OnErrorLocal, ping, 10*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)))
	var calls, failed atomic.Int64
	fs.Observe = func(_ time.Duration, err error) {
		calls.Add(1)
		if err != nil {
			failed.Add(1)
		}
	}
	t.Cleanup(fs.Close)
	ctx := t.Context()
	if r, err := fs.Take(ctx, want(5, 0)); err != nil || r.Granted != pc(5, 0) || fs.Degraded() {
		t.Fatalf("with Redis: %v %v degraded=%v", r, err, fs.Degraded())
	}
	srv.Kill(t)
	r, err := fs.Take(ctx, want(5, 0))
	if err != nil || !fs.Degraded() || r.Granted != pc(1, 0) { // the local window: 1 a second
		t.Fatalf("Redis down: granted %v err %v degraded=%v; want the local store's 1, degraded", r.Granted, err, fs.Degraded())
	}
	for range 3 {
		if _, err := fs.Take(ctx, TakeRequest{Want: pc(1, 0), Limits: windowLimits}); err != nil {
			t.Fatal(err)
		}
	}
	if n := countLines(logs.String(), "store_degraded"); n != 1 {
		t.Errorf("logged store_degraded %d times, want once", n)
	}
	// The failed call is observed as one; the fallback's answers are not
	// calls to Redis at all.
	if calls.Load() != 2 || failed.Load() != 1 {
		t.Errorf("observed %d calls, %d failed; want the one before and the one that failed", calls.Load(), failed.Load())
	}
	srv.Restart(t)
	waitUntil(t, "recovery", func() bool { return !fs.Degraded() })
	if r, err := fs.Take(ctx, want(3, 0)); err != nil || r.Granted != pc(3, 0) {
		t.Fatalf("after recovery: %v %v", r, err)
	}
	if n := countLines(logs.String(), "store_recovered"); n != 1 {
		t.Errorf("logged store_recovered %d times, want once", n)
	}

	closed := NewFailover(primary, local, OnErrorClosed, ping, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	t.Cleanup(closed.Close)
	srv.Kill(t)
	if _, err := closed.Take(ctx, want(1, 0)); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("closed, Redis down: %v, want ErrStoreUnavailable", err)
	}
	open := NewFailover(primary, local, OnErrorOpen, ping, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	t.Cleanup(open.Close)
	if r, err := open.Take(ctx, want(1000, 1000)); err != nil || r.Granted != pc(1000, 1000) {
		t.Fatalf("open, Redis down: %v %v, want everything", r, err)
	}
}

func countLines(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// waitUntil is poll.Until.
func waitUntil(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }

// TestRedisFairSplit: a fair class's second is shared between the
// replicas with waiters: in its first half a replica takes only its part,
// and the rest after it; a replica alone, or a fifo class, takes it all
// at once.
func TestRedisFairSplit(t *testing.T) {
	lim := Limits{AccountRPM: 600, InFlight: 1000, BulkInFlight: 1000, BulkRPM: 600} // bulk may take 10 a second
	fifo := lim
	lim.Fair = [classify.NumClasses]bool{true, true}
	a, b, advance := expiringPair(t)
	ctx := t.Context()
	take := func(s *Redis, want int64, l Limits) TakeResult {
		t.Helper()
		r, err := s.Take(ctx, TakeRequest{Want: pc(0, want), Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Second 0: a alone takes all it may.
	if r := take(a, 20, lim); r.Granted != pc(0, 10) {
		t.Fatalf("a alone got %v, want the whole second's 10", r.Granted)
	}
	// Second 1: b had waiters in second 0 (it asks now, before a): its part.
	advance(time.Second)
	if r := take(b, 1, lim); r.Granted != pc(0, 1) {
		t.Fatalf("b got %v, want its 1", r.Granted)
	}
	if r := take(a, 20, lim); r.Granted != pc(0, 5) || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("a beside b, first half: %v, retry %s; want 5 (half of 10) and a retry at the half", r.Granted, r.RetryAfter)
	}
	advance(500 * time.Millisecond)
	if r := take(a, 15, lim); r.Granted != pc(0, 4) {
		t.Fatalf("a in the second half: %v; want the 4 left", r.Granted)
	}
	// Second 2: b still counts (waiters last second): a gets its half, not all.
	advance(500 * time.Millisecond)
	if r := take(a, 20, lim); r.Granted != pc(0, 5) {
		t.Fatalf("a, b's waiters a second old: %v; want its part, 5", r.Granted)
	}
	// Second 4: b has had no waiters for two seconds: a takes everything.
	advance(2 * time.Second)
	if r := take(a, 20, lim); r.Granted != pc(0, 10) {
		t.Fatalf("a, b idle: %v; want all 10", r.Granted)
	}
	// fifo: b's waiters do not hold a back.
	advance(time.Second)
	take(b, 1, fifo)
	advance(time.Second)
	if r := take(a, 20, fifo); r.Granted != pc(0, 10) {
		t.Fatalf("fifo: a got %v, want all 10 whoever else waits", r.Granted)
	}
}

// TestRedisFleetCredits: the store counts each replica's credits (slots
// granted ahead of demand) apart, so the fleet's count of requests in
// flight leaves them out; a dead replica's credits go with it.
func TestRedisFleetCredits(t *testing.T) {
	a, b, advance := expiringPair(t)
	ctx := t.Context()
	take := func(s *Redis, held, credits PerClass) TakeResult {
		t.Helper()
		r, err := s.Take(ctx, TakeRequest{InFlight: held, Credits: credits, Limits: inFlightLimits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	take(a, pc(0, 8), pc(0, 3)) // 8 slots, 3 of them credits
	if r := take(b, pc(0, 2), pc(0, 0)); r.FleetInFlight != pc(0, 10) || r.FleetCredits != pc(0, 3) {
		t.Fatalf("fleet %v, credits %v; want 10 slots of which 3 credits", r.FleetInFlight, r.FleetCredits)
	}
	if r := take(a, pc(0, 6), pc(0, 1)); r.FleetInFlight != pc(0, 8) || r.FleetCredits != pc(0, 1) {
		t.Fatalf("after a used 2 credits: fleet %v, credits %v; want 8 and 1", r.FleetInFlight, r.FleetCredits)
	}
	advance(4 * time.Second) // a falls silent past its TTL
	if r := take(b, pc(0, 2), pc(0, 0)); r.FleetInFlight != pc(0, 2) || r.FleetCredits != pc(0, 0) {
		t.Fatalf("a reaped: fleet %v, credits %v; want b's 2 and none", r.FleetInFlight, r.FleetCredits)
	}
}
