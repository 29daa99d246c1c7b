package gate

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// localReplica is one replica of a fleet on a real Redis, its budget
// gate over store (LocalBudgets, or RedisBudgets alone) behind its own
// breaker f, on the test's clock.
type localReplica struct {
	g     *BudgetGate
	local *LocalBudgets
	f     *store.Failover
}

// newLocalReplica returns a replica named name on client under cfg with
// a $1 daily budget on caller "import"; local says budgets.on_store_error
// is local (of 2 expected replicas), else closed.
func newLocalReplica(t *testing.T, client *redis.Client, cfg store.Config, name string, now time.Time, local bool) localReplica {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	f := store.NewFailover(store.NewRedis(client, cfg), store.NewMemory(nil), store.OnErrorLocal, store.Probe(client), 5*time.Millisecond, log)
	t.Cleanup(f.Close)
	rb := NewRedisBudgets(client, cfg, name)
	rb.clock = func() time.Time { return now }
	r := localReplica{f: f}
	var bs BudgetStore = rb
	if local {
		r.local = NewLocalBudgets(rb, f, 2)
		bs = r.local
	}
	r.g = NewBudgetGate(bs, nil, nil, time.Second, log)
	r.g.now = func() time.Time { return now }
	r.g.Reconfigure(defaultGateClasses(), []classify.Caller{{Name: "import", Budget: classify.Budget{USD: 1, Per: classify.PerDay}}})
	return r
}

// spend reserves cost on r's budget and, reserved, settles it at cost,
// as the gate's loop would.
func (r localReplica) spend(ctx context.Context, cost float64) error {
	pass, err := r.g.Start(ctx, Request{Caller: "import", Class: classify.Bulk, Cost: price.FromDollars(cost), Priced: true, Generates: true},
		time.Now().Add(time.Second))
	if err != nil {
		return err
	}
	pass.OnSettle(price.FromDollars(cost))
	r.g.settlePending(ctx)
	return nil
}

// spent is r's budget as its gate last read it.
func (r localReplica) spent(ctx context.Context) BudgetState {
	r.g.refresh(ctx)
	for _, b := range r.g.State() {
		if b.Budget == "caller:import" {
			return b
		}
	}
	return BudgetState{}
}

// TestLocalBudgetsOutage: budgets.on_store_error (issue 37 item 3) on a
// real Redis that is killed and restarted (appendonly, so it comes back
// with what it held). Closed, the default, refuses 503 store_unavailable
// during the outage. Local: two replicas that read $0.40 spent of $1 may
// each spend $0.30 (what was left ÷ 2) on their own while Redis is down,
// and are refused budget_exceeded beyond (a batch, which no local share
// can hold, store_unavailable); once Redis answers again, what
// each spent is added to Redis's spend once — $1.00 in all, however often
// reconcile runs — and the budget refuses from Redis.
func TestLocalBudgetsOutage(t *testing.T) {
	srv := redistest.StartPersistent(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cfg := store.Config{KeyPrefix: redistest.Prefix(t), Heartbeat: time.Second, BudgetTimeout: time.Second, Timeout: time.Second}
	a := newLocalReplica(t, srv.Client(t), cfg, "a", now, true)
	b := newLocalReplica(t, srv.Client(t), cfg, "b", now, true)
	closed := newLocalReplica(t, srv.Client(t), cfg, "c", now, false)

	must(t, "spend $0.40 on Redis", a.spend(ctx, 0.40))
	for _, r := range []localReplica{a, b, closed} {
		if got := r.spent(ctx); got.Spent != 0.40 {
			t.Fatalf("before the outage: %+v, want $0.40 spent", got)
		}
	}

	srv.Kill(t)
	if err := closed.spend(ctx, 0.10); !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("on_store_error closed during the outage: %v, want store_unavailable", err)
	}
	for _, r := range []localReplica{a, b} {
		// A batch's reservation outlives its request: no local share holds
		// it, and what it reserved comes back.
		batch := Request{Caller: "import", Class: classify.Bulk, Cost: price.FromDollars(0.05), Priced: true, Generates: true}
		if _, err := r.g.ReserveBatch(ctx, batch, time.Now().Add(time.Second), BatchRecord{}); !errors.Is(err, store.ErrStoreUnavailable) {
			t.Fatalf("a batch during the outage: %v, want store_unavailable", err)
		}
		r.g.settlePending(ctx)
		for i := range 3 {
			if err := r.spend(ctx, 0.10); err != nil {
				t.Fatalf("local request %d of $0.10, within the $0.30 share: %v", i, err)
			}
		}
		var exceeded *BudgetExceededError
		if err := r.spend(ctx, 0.01); !errors.As(err, &exceeded) {
			t.Fatalf("past the $0.30 share: %v, want budget_exceeded", err)
		}
		if !r.f.Degraded() {
			t.Fatal("the breaker is closed during the outage")
		}
		if got := r.spent(ctx); got.Spent != 0.70 {
			t.Errorf("during the outage the replica reads %+v, want $0.40 + its $0.30", got)
		}
		if st, active := r.local.localState(); !active || len(st) != 1 || st[0].Spent != 0.30 || st[0].Reconciled != 0 {
			t.Errorf("local state during the outage: %+v active %v, want $0.30 spent locally, none reconciled", st, active)
		}
	}

	srv.Restart(t)
	for _, r := range []localReplica{a, b} {
		poll.Until(t, "the breaker to close", func() bool { return !r.f.Degraded() })
		for range 2 { // a second time changes nothing
			r.local.reconcile(ctx)
		}
		if n := r.local.unreconciled(); n != 0 {
			t.Errorf("left unreconciled: %v", n)
		}
	}
	keys := periods([]NamedBudget{{"caller:import", classify.Budget{USD: 1, Per: classify.PerDay}}}, now)
	rb := NewRedisBudgets(srv.Client(t), cfg, "reader")
	use, err := rb.read(ctx, keys)
	must(t, "read Redis", err)
	if use[0] != (budgetUse{Spent: price.FromDollars(1)}) {
		t.Fatalf("Redis after the reconciliation: %+v, want $1.00 spent ($0.40 + 2 × $0.30), nothing reserved", use[0])
	}
	t.Logf("Redis after the outage: spent %v of $1 ($0.40 before, $0.30 on each replica's share)", use[0].Spent)
	var exceeded *BudgetExceededError
	if err := a.spend(ctx, 0.01); !errors.As(err, &exceeded) {
		t.Fatalf("after the reconciliation: %v, want budget_exceeded from Redis", err)
	}
	if st, active := a.local.localState(); active || st[0].Reconciled != 0.30 {
		t.Errorf("local state after: %+v active %v, want $0.30 reconciled, not local", st, active)
	}
}

// TestLocalBudgetsNeverRead: a budget this replica never read has no
// share: during an outage its requests are refused 503
// store_unavailable, as under closed.
func TestLocalBudgetsNeverRead(t *testing.T) {
	srv := redistest.StartPersistent(t)
	cfg := store.Config{KeyPrefix: redistest.Prefix(t), Heartbeat: time.Second, BudgetTimeout: time.Second, Timeout: time.Second}
	r := newLocalReplica(t, srv.Client(t), cfg, "a", time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), true)
	srv.Kill(t)
	if err := r.spend(t.Context(), 0.10); !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("%v, want store_unavailable", err)
	}
}
