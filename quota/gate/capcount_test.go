package gate

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// capCountStep is one take and what it must answer.
type capCountStep struct {
	at       time.Duration
	want     int64
	inFlight int64
	granted  int64
	fleet    int64
	retry    bool // RetryAfter > 0
}

// runCapCounterConformance: a counter grants a caller's requests while
// its window and its in-flight bound have room, counts them, takes the
// replica's word for what it holds, starts every second afresh, and
// says when to ask again when the window stopped it.
func runCapCounterConformance(t *testing.T, newCounter func(t *testing.T, now func() time.Time) CapCounter, inFlightRetry bool) {
	tests := []struct {
		name  string
		b     capBounds
		steps []capCountStep
	}{
		{"in flight", capBounds{MaxInFlight: 2, RequestsPerMinute: unbounded}, []capCountStep{
			{0, 3, 0, 2, 2, inFlightRetry},
			{10 * time.Millisecond, 1, 2, 0, 2, inFlightRetry},
			{20 * time.Millisecond, 1, 1, 1, 2, false}, // one came back
			{30 * time.Millisecond, 0, 0, 0, 0, false}, // both came back
		}},
		{"window", capBounds{MaxInFlight: unbounded, RequestsPerMinute: 180}, []capCountStep{
			{0, 5, 0, 3, 3, true},
			{500 * time.Millisecond, 1, 0, 0, 0, true}, // the second is spent, whatever is in flight
			{time.Second, 4, 0, 3, 3, true},
			{2 * time.Second, 2, 3, 2, 5, false},
		}},
		{"both, zero admits nothing", capBounds{MaxInFlight: 0, RequestsPerMinute: unbounded}, []capCountStep{
			{0, 1, 0, 0, 0, inFlightRetry},
		}},
	}
	base := time.Unix(1_700_000_000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			c := newCounter(t, func() time.Time { return now })
			for i, st := range tt.steps {
				now = base.Add(st.at)
				ans, err := c.take(t.Context(), capTake{Name: "a", Want: st.want, InFlight: st.inFlight, Cap: tt.b})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if ans.Granted != st.granted || ans.FleetInFlight != st.fleet || (ans.RetryAfter > 0) != st.retry {
					t.Fatalf("step %d: %+v, want granted %d fleet %d retry %v", i, ans, st.granted, st.fleet, st.retry)
				}
				if ans.Sec != now.Unix() {
					t.Fatalf("step %d: second %d, want %d", i, ans.Sec, now.Unix())
				}
			}
		})
	}
}

func TestCapCounterConformance(t *testing.T) {
	t.Run("in-process", func(t *testing.T) {
		runCapCounterConformance(t, func(_ *testing.T, now func() time.Time) CapCounter { return NewMemoryCapCounter(now) }, false)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		runCapCounterConformance(t, func(t *testing.T, now func() time.Time) CapCounter {
			c := newTestCapCounter(t, srv, redistest.Prefix(t))
			c.clock = now
			return c
		}, true)
	})
}

func newTestCapCounter(t testing.TB, srv *redistest.Server, prefix string) *RedisCapCounter {
	t.Helper()
	return NewRedisCapCounter(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second, Heartbeat: time.Second}, "")
}

// TestRedisCapReplicaExpiry: a replica that dies holding slots under a
// cap stops counting against it once its heartbeat expires, and every
// key the cap uses has a TTL and shares one hash tag.
func TestRedisCapReplicaExpiry(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	now := time.Unix(1_700_000_000, 0)
	dead, live := newTestCapCounter(t, srv, prefix), newTestCapCounter(t, srv, prefix)
	dead.clock = func() time.Time { return now }
	live.clock = dead.clock
	ctx := t.Context()
	b := capBounds{MaxInFlight: 2, RequestsPerMinute: unbounded}
	take := func(c CapCounter, want, held int64) capAnswer {
		t.Helper()
		ans, err := c.take(ctx, capTake{Name: "a", Want: want, InFlight: held, Cap: b})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	if a := take(dead, 2, 0); a.Granted != 2 {
		t.Fatalf("dead replica got %+v", a)
	}
	now = now.Add(2 * time.Second) // within 3 heartbeats: still counted
	if a := take(live, 1, 0); a.Granted != 0 || a.FleetInFlight != 2 {
		t.Fatalf("before expiry: live got %+v; want nothing, 2 in flight", a)
	}
	now = now.Add(2 * time.Second) // 4 s of silence > 3 s TTL
	if a := take(live, 2, 0); a.Granted != 2 || a.FleetInFlight != 2 {
		t.Fatalf("after expiry: live got %+v; want both", a)
	}
	c := srv.Client(t)
	tag := "{" + prefix + ":cap:a}"
	keys, err := c.Keys(context.Background(), tag+"*").Result()
	if err != nil || len(keys) == 0 || len(keys) > len(capKeys(prefix, "a")) {
		t.Fatalf("keys %v (%v), want at most %d under %s", keys, err, len(capKeys(prefix, "a")), tag)
	}
	for _, k := range keys {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%s)", k, ttl)
		}
	}
}

// downCounter is a shared counter that always fails, as a dead Redis.
type downCounter struct{}

func (downCounter) take(context.Context, capTake) (capAnswer, error) {
	return capAnswer{}, errors.New("quota: redis cap: connection refused")
}

// TestFailoverCapCounter: while the shared counter fails, caps follow
// store.on_error as the pools do: the per-replica bound (local), every
// request (open), or ErrStoreUnavailable (closed); the failure opens the
// same breaker the pools use.
func TestFailoverCapCounter(t *testing.T) {
	t.Parallel()
	fleet := capBounds{MaxInFlight: 4, RequestsPerMinute: unbounded}
	local := capBounds{MaxInFlight: 1, RequestsPerMinute: unbounded}
	tests := []struct {
		policy  store.OnError
		granted int64
		err     error
	}{
		{store.OnErrorLocal, 1, nil},
		{store.OnErrorOpen, 3, nil},
		{store.OnErrorClosed, 0, store.ErrStoreUnavailable},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			down := func(context.Context) error { return errors.New("down") }
			fs := store.NewFailover(nil, store.NewMemory(nil), tt.policy, down, time.Hour, slog.New(slog.DiscardHandler))
			t.Cleanup(fs.Close)
			c := NewFailoverCapCounter(downCounter{}, NewMemoryCapCounter(nil), fs)
			ans, err := c.take(t.Context(), capTake{Name: "a", Want: 3, Cap: fleet, Local: local})
			if !errors.Is(err, tt.err) || ans.Granted != tt.granted {
				t.Fatalf("granted %d, err %v; want %d, %v", ans.Granted, err, tt.granted, tt.err)
			}
			if !fs.Degraded() {
				t.Error("a failed cap call did not open the breaker")
			}
		})
	}
}
