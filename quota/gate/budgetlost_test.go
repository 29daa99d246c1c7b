package gate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// lostEnv is a budget in Redis that two replicas share, gone and live,
// on a clock the test moves.
type lostEnv struct {
	gone, live *RedisBudgets
	now        *time.Time
	keys       []budgetKey
	c          *redis.Client
	prefix     string
}

// use reads the budget's use, failing the test on an error.
func (e *lostEnv) use(t *testing.T) budgetUse {
	t.Helper()
	u, err := e.live.read(t.Context(), e.keys)
	if err != nil {
		t.Fatal(err)
	}
	return u[0]
}

// must fails the test on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantUse fails the test unless the budget's use is want.
func (e *lostEnv) wantUse(t *testing.T, after string, want budgetUse) {
	t.Helper()
	if got := e.use(t); got != want {
		t.Fatalf("after %s: %+v, want %+v", after, got, want)
	}
}

// spend reserves 50 under id "0" on gone and settles it at 20.
func (e *lostEnv) spend(t *testing.T) {
	t.Helper()
	ans, err := e.gone.reserve(t.Context(), e.keys, "0", 50)
	if err != nil || ans.Outcome != budgetReserved {
		t.Fatalf("reserve 0: %+v %v", ans, err)
	}
	must(t, "settle 0", e.gone.settle(t.Context(), e.keys, "0", 20))
	e.wantUse(t, "20 spent", budgetUse{Spent: 20})
}

// fields returns the budget hash's fields.
func (e *lostEnv) fields(t *testing.T) []string {
	t.Helper()
	m, err := e.c.HGetAll(t.Context(), "{"+e.prefix+":budget}:"+e.keys[0].Budget+":"+e.keys[0].Period).Result()
	must(t, "HGETALL", err)
	var f []string
	for k := range m {
		f = append(f, k)
	}
	return f
}

// TestRedisBudgetLostAnswers: budget.lua when a call's answer was lost
// and the call is made again (issue 31) — a settle of a reaped
// reservation refunds once; the release of a reservation whose reserve
// ran changes the spend by nothing; the release of one never made changes
// nothing, leaves only a marker that expires with the budget, and makes
// the reserve that comes after it change nothing; the alive heartbeat's
// answer (no budget) parses.
func TestRedisBudgetLostAnswers(t *testing.T) {
	srv := redistest.Start(t)
	resets := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *lostEnv)
	}{
		{"a settle of a reaped reservation refunds once", func(t *testing.T, e *lostEnv) {
			ans, err := e.gone.reserve(t.Context(), e.keys, "1", 80)
			if err != nil || ans.Outcome != budgetReserved {
				t.Fatalf("gone's reservation: %+v %v", ans, err)
			}
			*e.now = e.now.Add(4 * time.Second) // gone silent past its TTL (3 s)
			ans, err = e.live.reserve(t.Context(), e.keys, "1", 30)
			if err != nil || ans.Outcome != budgetExceeded || ans.Use[0] != (budgetUse{Spent: 80}) {
				t.Fatalf("live after gone's TTL: %+v %v, want exceeded with gone's 80 charged", ans, err)
			}
			for i := range 3 {
				must(t, "gone's settle", e.gone.settle(t.Context(), e.keys, "1", 25))
				e.wantUse(t, []string{"gone settled at 25", "the settle again", "the settle a third time"}[i], budgetUse{Spent: 25})
			}
		}},
		{"a release of a reservation whose reserve ran", func(t *testing.T, e *lostEnv) {
			e.spend(t)
			if _, err := e.gone.reserve(t.Context(), e.keys, "1", 40); err != nil {
				t.Fatal(err)
			}
			e.wantUse(t, "the reserve whose answer was lost", budgetUse{Spent: 20, Reserved: 40})
			for range 2 {
				must(t, "release", e.gone.settle(t.Context(), e.keys, "1", 0))
				e.wantUse(t, "its release", budgetUse{Spent: 20})
			}
		}},
		{"a release of a reservation never made", func(t *testing.T, e *lostEnv) {
			e.spend(t)
			must(t, "release", e.gone.settle(t.Context(), e.keys, "1", 0))
			e.wantUse(t, "the release of a reservation never made", budgetUse{Spent: 20})
			// Its reserve comes after it (sent on another connection).
			if ans, err := e.gone.reserve(t.Context(), e.keys, "1", 40); err == nil || !strings.Contains(err.Error(), "released before it was made") {
				t.Fatalf("a reserve after its release: %+v %v, want refused", ans, err)
			}
			e.wantUse(t, "a reserve after its release", budgetUse{Spent: 20})
			if f := e.fields(t); len(f) != 2 {
				t.Errorf("the budget hash holds %v, want spent and reserved only", f)
			}
			marker := "{" + e.prefix + ":budget}:settled:gone:1"
			hash := "{" + e.prefix + ":budget}:" + e.keys[0].Budget + ":" + e.keys[0].Period
			if ttl, hashTTL := e.c.TTL(t.Context(), marker).Val(), e.c.TTL(t.Context(), hash).Val(); ttl <= 0 || ttl > hashTTL {
				t.Errorf("the release's marker expires in %s, want within the budget period's %s", ttl, hashTTL)
			}
		}},
		{"the alive heartbeat's answer parses", func(t *testing.T, e *lostEnv) {
			must(t, "alive", e.gone.Alive(t.Context()))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			prefix := redistest.Prefix(t)
			e := &lostEnv{gone: newTestRedisBudgets(t, srv, prefix, "gone"), live: newTestRedisBudgets(t, srv, prefix, "live"), now: &now,
				keys: []budgetKey{{Budget: "caller:import", Period: "2026-12", Limit: 100, Resets: resets}}, c: srv.Client(t), prefix: prefix}
			e.gone.clock, e.live.clock = clock, clock
			tc.run(t, e)
			// Every key the budget left has a TTL, under the one hash tag.
			all, err := e.c.Keys(context.Background(), "*"+prefix+"*").Result()
			must(t, "KEYS", err)
			for _, k := range all {
				if !strings.HasPrefix(k, "{"+prefix+":budget}") || e.c.PTTL(t.Context(), k).Val() <= 0 {
					t.Errorf("key %s: not under {%s:budget}, or no TTL", k, prefix)
				}
			}
		})
	}
}

// TestBudgetGateReleasesLostReserve: on a Redis behind a relay that keeps
// its answers back, a reserve that ran but whose answer came too late
// refuses its request as the store unavailable and is released once
// Redis answers again: what it reserved is gone, nothing spent. While
// maxPending settles wait for the store, a request is refused without
// asking it.
func TestBudgetGateReleasesLostReserve(t *testing.T) {
	srv := redistest.Start(t)
	relay := srv.Relay(t, `"op":"reserve"`)
	cfg := store.Config{RedisURL: relay.URL(), KeyPrefix: redistest.Prefix(t), Timeout: 50 * time.Millisecond,
		BudgetTimeout: 200 * time.Millisecond, Heartbeat: time.Second}
	client, err := store.NewRedisClient(cfg)
	must(t, "client", err)
	t.Cleanup(func() { _ = client.Close() })
	budgets := NewRedisBudgets(client, cfg, "r1")
	direct := NewRedisBudgets(srv.Client(t), cfg, "reader")
	g := startBudgetGate(t, budgets, budgets.Alive)
	g.maxPending = 1
	req := Request{Caller: "import", Class: classify.Interactive, Cost: 7 * cent, Priced: true, Generates: true}
	keys := []budgetKey{{Budget: "caller:import", Period: time.Now().UTC().Format("2006-01-02")}}
	use := func() budgetUse {
		u, err := direct.read(t.Context(), keys)
		must(t, "read", err)
		return u[0]
	}

	p, err := g.Start(t.Context(), req, time.Now())
	must(t, "a reservation", err)
	p.Settle(2 * cent)
	poll.Until(t, "the first request settled", func() bool { return use() == budgetUse{Spent: 2 * cent} })

	relay.Hold()
	if _, err := g.Start(t.Context(), req, time.Now()); !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("a reserve whose answer is kept back: %v, want the store unavailable", err)
	}
	poll.Until(t, "the reserve to have run, its answer abandoned", func() bool { return relay.Abandoned(`"op":"reserve"`) == 1 })
	if u := use(); u != (budgetUse{Spent: 2 * cent, Reserved: 7 * cent}) {
		t.Fatalf("after the reserve whose answer was lost: %+v, want its 7¢ reserved", u)
	}
	if _, err := g.Start(t.Context(), req, time.Now()); !errors.Is(err, store.ErrStoreUnavailable) || !strings.Contains(err.Error(), "wait for the store") {
		t.Fatalf("with a release waiting for the store: %v, want refused without asking it", err)
	}
	relay.Release()
	poll.Until(t, "the lost reservation released", func() bool { return use() == budgetUse{Spent: 2 * cent} })
	poll.Until(t, "the gate to take requests again", func() bool {
		p, err := g.Start(t.Context(), req, time.Now())
		if err == nil {
			p.Release()
		}
		return err == nil
	})
}
