package gate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// budgetStep is one call on a budget store and what it must answer.
type budgetStep struct {
	op      string // reserve, force or settle
	keys    []int  // indexes into the test's budgets
	id      string
	cost    price.Nanodollars // reserve: the worst case; settle: the real cost (0: a release)
	want    budgetOutcome
	refused int
	use     []budgetUse // each of keys' use after the step
}

// runBudgetConformance: a store reserves a worst case on every budget of a
// request at once or on none, answers wait while others' reservations
// hold the room and exceeded when what was spent leaves none, and
// settling replaces a reservation by its real cost. A reserve or settle
// made again (its answer lost) changes nothing, nor does the release of
// a reservation never made.
func runBudgetConformance(t *testing.T, newStore func(t *testing.T) BudgetStore) {
	resets := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	budgets := []budgetKey{
		{Budget: "caller:import", Period: "2026-12", Limit: 100, Resets: resets},
		{Budget: "class:bulk", Period: "2026-12", Limit: 150, Resets: resets},
	}
	both := []int{0, 1}
	tests := []struct {
		name  string
		steps []budgetStep
	}{
		{"reserve, settle, exceed", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 60, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "reserve", keys: both, id: "b", cost: 50, want: budgetWait, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "settle", keys: both, id: "a", cost: 20, use: []budgetUse{{20, 0}, {20, 0}}},
			{op: "reserve", keys: both, id: "b", cost: 50, use: []budgetUse{{20, 50}, {20, 50}}},
			{op: "settle", keys: both, id: "b", cost: 50, use: []budgetUse{{70, 0}, {70, 0}}},
			{op: "reserve", keys: both, id: "c", cost: 31, want: budgetExceeded, use: []budgetUse{{70, 0}, {70, 0}}},
			{op: "reserve", keys: both, id: "c", cost: 30, use: []budgetUse{{70, 30}, {70, 30}}},
		}},
		{"the class budget refuses", []budgetStep{
			{op: "reserve", keys: []int{1}, id: "a", cost: 120, use: []budgetUse{{0, 120}}},
			{op: "settle", keys: []int{1}, id: "a", cost: 120, use: []budgetUse{{120, 0}}},
			{op: "reserve", keys: both, id: "b", cost: 40, want: budgetExceeded, refused: 1, use: []budgetUse{{0, 0}, {120, 0}}},
		}},
		{"exceeded outranks wait", []budgetStep{
			{op: "reserve", keys: []int{0}, id: "a", cost: 90, use: []budgetUse{{0, 90}}},
			{op: "reserve", keys: []int{1}, id: "b", cost: 140, use: []budgetUse{{0, 140}}},
			{op: "settle", keys: []int{1}, id: "b", cost: 140, use: []budgetUse{{140, 0}}},
			{op: "reserve", keys: both, id: "c", cost: 20, want: budgetExceeded, refused: 1, use: []budgetUse{{0, 90}, {140, 0}}},
		}},
		{"a settle costs more than reserved", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 10, use: []budgetUse{{0, 10}, {0, 10}}},
			{op: "settle", keys: both, id: "a", cost: 35, use: []budgetUse{{35, 0}, {35, 0}}},
		}},
		{"a repeated settle changes nothing", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 60, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "settle", keys: both, id: "a", cost: 20, use: []budgetUse{{20, 0}, {20, 0}}},
			{op: "settle", keys: both, id: "a", cost: 20, use: []budgetUse{{20, 0}, {20, 0}}},
			{op: "reserve", keys: both, id: "b", cost: 30, use: []budgetUse{{20, 30}, {20, 30}}},
			{op: "settle", keys: both, id: "a", cost: 20, use: []budgetUse{{20, 30}, {20, 30}}},
		}},
		{"a repeated reserve changes nothing", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 60, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "reserve", keys: both, id: "a", cost: 60, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "settle", keys: both, id: "a", cost: 20, use: []budgetUse{{20, 0}, {20, 0}}},
		}},
		{"a forced reserve passes the limits, once", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 90, use: []budgetUse{{0, 90}, {0, 90}}},
			{op: "settle", keys: both, id: "a", cost: 90, use: []budgetUse{{90, 0}, {90, 0}}},
			{op: "force", keys: both, id: "b", cost: 80, use: []budgetUse{{90, 80}, {90, 80}}},
			{op: "force", keys: both, id: "b", cost: 80, use: []budgetUse{{90, 80}, {90, 80}}},
			{op: "settle", keys: both, id: "b", cost: 80, use: []budgetUse{{170, 0}, {170, 0}}},
			{op: "settle", keys: both, id: "b", cost: 80, use: []budgetUse{{170, 0}, {170, 0}}},
			{op: "reserve", keys: both, id: "c", cost: 1, want: budgetExceeded, use: []budgetUse{{170, 0}, {170, 0}}},
		}},
		{"a release of a reservation never made changes nothing", []budgetStep{
			{op: "reserve", keys: both, id: "a", cost: 60, use: []budgetUse{{0, 60}, {0, 60}}},
			{op: "settle", keys: both, id: "a", cost: 50, use: []budgetUse{{50, 0}, {50, 0}}},
			{op: "settle", keys: both, id: "b", use: []budgetUse{{50, 0}, {50, 0}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			for i, st := range tt.steps {
				keys := make([]budgetKey, len(st.keys))
				for j, k := range st.keys {
					keys[j] = budgets[k]
				}
				var uses []budgetUse
				switch st.op {
				case "reserve":
					ans, err := s.reserve(t.Context(), keys, st.id, st.cost)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if ans.Outcome != st.want || ans.Outcome != budgetReserved && ans.Refused != st.refused {
						t.Fatalf("step %d: outcome %d refused %d, want %d refused %d", i, ans.Outcome, ans.Refused, st.want, st.refused)
					}
					uses = ans.Use
				case "force":
					if err := s.force(t.Context(), keys, st.id, st.cost); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				case "settle":
					if err := s.settle(t.Context(), keys, st.id, st.cost); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				read, err := s.read(t.Context(), keys)
				if err != nil {
					t.Fatalf("step %d: read: %v", i, err)
				}
				if fmt.Sprint(read) != fmt.Sprint(st.use) || uses != nil && fmt.Sprint(uses) != fmt.Sprint(st.use) {
					t.Fatalf("step %d (%s %s): use %v (answer %v), want %v", i, st.op, st.id, read, uses, st.use)
				}
			}
		})
	}
	t.Run("never overspent under concurrency", func(t *testing.T) {
		s := newStore(t)
		keys := []budgetKey{budgets[0]}
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := 0
		for i := range 40 {
			wg.Go(func() {
				ans, err := s.reserve(context.Background(), keys, fmt.Sprint(i), 7)
				if err != nil {
					t.Error(err)
					return
				}
				if ans.Outcome == budgetReserved {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if granted != 14 { // 14 × 7 = 98 ≤ 100 < 105
			t.Fatalf("%d reservations of 7 granted on a budget of 100, want 14", granted)
		}
	})
}

func TestBudgetStoreConformance(t *testing.T) {
	t.Run("in-process", func(t *testing.T) {
		runBudgetConformance(t, func(*testing.T) BudgetStore { return NewMemoryBudgets() })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		runBudgetConformance(t, func(t *testing.T) BudgetStore { return newTestRedisBudgets(t, srv, redistest.Prefix(t), "r1") })
	})
}

func newTestRedisBudgets(t testing.TB, srv *redistest.Server, prefix, replica string) *RedisBudgets {
	t.Helper()
	return NewRedisBudgets(srv.Client(t), store.Config{KeyPrefix: prefix, BudgetTimeout: 2 * time.Second, Heartbeat: time.Second}, replica)
}

// TestRedisBudgetReplicaGone: the reservations of a replica that stopped
// calling are charged in full once another replica's reservation would
// wait on them, and when the replica comes back its settle gives back
// what each held beyond its cost. Every key has a TTL and the one hash
// tag.
func TestRedisBudgetReplicaGone(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	gone, live := newTestRedisBudgets(t, srv, prefix, "gone"), newTestRedisBudgets(t, srv, prefix, "live")
	gone.clock, live.clock = clock, clock
	ctx := t.Context()
	keys := []budgetKey{{Budget: "caller:import", Period: "2026-12", Limit: 100, Resets: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if ans, err := gone.reserve(ctx, keys, "1", 80); err != nil || ans.Outcome != budgetReserved {
		t.Fatalf("gone's reservation: %+v %v", ans, err)
	}
	now = now.Add(2 * time.Second) // within its TTL (3 s): still a reservation
	if ans, err := live.reserve(ctx, keys, "1", 30); err != nil || ans.Outcome != budgetWait {
		t.Fatalf("live within gone's TTL: %+v %v, want wait", ans, err)
	}
	now = now.Add(2 * time.Second) // 4 s silent: gone
	ans, err := live.reserve(ctx, keys, "1", 30)
	if err != nil || ans.Outcome != budgetExceeded || ans.Use[0] != (budgetUse{Spent: 80}) {
		t.Fatalf("live after gone's TTL: %+v %v, want exceeded with gone's 80 spent", ans, err)
	}
	if err := gone.settle(ctx, keys, "1", 25); err != nil {
		t.Fatal(err)
	}
	use, err := live.read(ctx, keys)
	if err != nil || use[0] != (budgetUse{Spent: 25}) {
		t.Fatalf("after gone settled at 25: %+v %v, want 25 spent, none reserved", use, err)
	}
	c := srv.Client(t)
	all, err := c.Keys(context.Background(), "*"+prefix+"*").Result()
	if err != nil || len(all) != 2 {
		t.Fatalf("keys %v (%v), want the alive set and one budget period", all, err)
	}
	for _, k := range all {
		if k[:len("{"+prefix+":budget}")] != "{"+prefix+":budget}" {
			t.Errorf("key %s is not under {%s:budget}", k, prefix)
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%s)", k, ttl)
		}
	}
}

// TestBudgetFile: an in-process store's spend survives in its file, the
// reservations not settled counted as spent; a missing file is no spend;
// a malformed or foreign one is refused.
func TestBudgetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spend.json")
	keys := []budgetKey{{Budget: "caller:import", Period: "2026-12", Limit: 1000}}
	m := NewMemoryBudgets()
	if err := m.Load(path); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	ctx := t.Context()
	for i, cost := range []price.Nanodollars{100, 200} {
		if _, err := m.reserve(ctx, keys, fmt.Sprint(i), cost); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.settle(ctx, keys, "0", 40); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	restarted := NewMemoryBudgets()
	if err := restarted.Load(path); err != nil {
		t.Fatal(err)
	}
	use, _ := restarted.read(ctx, keys)
	if use[0] != (budgetUse{Spent: 240}) {
		t.Fatalf("after a restart: %+v, want 240 spent (40 settled, 200 still reserved)", use[0])
	}
	for _, body := range []string{"not json", `{"version":2,"budgets":[]}`} {
		bad := filepath.Join(t.TempDir(), "spend.json")
		if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := NewMemoryBudgets().Load(bad); err == nil {
			t.Errorf("a spend file holding %s loaded", body)
		}
	}
}
