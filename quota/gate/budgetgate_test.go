package gate

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// defaultGateClasses is what the gates read of DefaultConfig's classes:
// max_queue 1000 for interactive, 10,000 for bulk; no budgets.
func defaultGateClasses() Classes {
	return Classes{MaxQueue: [classify.NumClasses]int{1000, 10000}}
}

// startBudgetGate runs a gate over store with a $1 budget on caller
// "import" and $1.50 on bulk, until the test ends.
func startBudgetGate(t *testing.T, store BudgetStore, alive func(context.Context) error) *BudgetGate {
	t.Helper()
	g := NewBudgetGate(store, nil, alive, time.Second, slog.New(slog.DiscardHandler))
	cfg := defaultGateClasses()
	cfg.Budget[classify.Bulk] = classify.Budget{USD: 1.5, Per: classify.PerMonth}
	g.Reconfigure(cfg, []classify.Caller{
		{Name: "import", Budget: classify.Budget{USD: 1, Per: classify.PerDay}},
		{Name: "lenient", Budget: classify.Budget{USD: 1, Per: classify.PerDay, Unpriced: classify.UnpricedAllow}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

const cent = price.Nanodollars(10_000_000)

// TestBudgetGateNeverOverspends: 30 requests at once of up to 7¢ each on
// a $1 budget, each settling at 5¢ (a reservation of its worst case, a
// real cost below it): the spend never passes $1, requests wait for
// others to settle rather than be refused early, and the budget ends
// spent to within one request's worst case; what does not fit is
// refused as exceeded, naming the budget — in process and on Redis.
func TestBudgetGateNeverOverspends(t *testing.T) {
	for _, c := range budgetStoreCases() {
		t.Run(c.name, func(t *testing.T) {
			store, alive := c.store(t)
			g := startBudgetGate(t, store, alive)
			var spent, admitted, exceeded atomic.Int64
			var wg sync.WaitGroup
			for range 30 {
				wg.Go(func() {
					for {
						p, err := g.Start(t.Context(), Request{Caller: "import", Class: classify.Interactive, Cost: 7 * cent, Priced: true, Generates: true},
							time.Now().Add(10*time.Second))
						var over *BudgetExceededError
						switch {
						case errors.As(err, &over):
							if over.Budget != "caller:import" || over.Limit != 100*cent {
								t.Errorf("refused by %+v, want caller:import's $1", over)
							}
							exceeded.Add(1)
							return
						case err != nil:
							t.Error(err)
							return
						}
						admitted.Add(1)
						if now := price.Nanodollars(spent.Add(int64(5 * cent))); now > 100*cent {
							t.Errorf("%s spent on a $1 budget", now)
						}
						p.Settle(5 * cent)
					}
				})
			}
			wg.Wait()
			use, err := store.read(t.Context(), []budgetKey{{Budget: "caller:import", Period: time.Now().UTC().Format("2006-01-02")}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d admitted, %s spent; %d refused as exceeded", admitted.Load(), use[0].Spent, exceeded.Load())
			if use[0].Spent != price.Nanodollars(spent.Load()) || use[0].Reserved != 0 || use[0].Spent <= 100*cent-7*cent || exceeded.Load() != 30 {
				t.Errorf("the store holds %+v; the requests spent %s; %d refused; want it all settled, more than $0.93 spent and all 30 refused at the end",
					use[0], price.Nanodollars(spent.Load()), exceeded.Load())
			}
		})
	}
}

// TestBudgetGateRules: what a budget does with each request.
func TestBudgetGateRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startBudgetGate(t, NewMemoryBudgets(), nil)
		start := func(caller string, class classify.Class, cost price.Nanodollars, priced bool, wait time.Duration) (Pass, error) {
			return g.Start(t.Context(), Request{Caller: caller, Class: class, Cost: cost, Priced: priced, Model: "gpt-x", Generates: true}, time.Now().Add(wait))
		}
		// No budget: passes, holding nothing.
		if p, err := start("other", classify.Interactive, 50*cent, true, 0); err != nil || p.OnSettle != nil || p.OnRelease != nil {
			t.Fatalf("a caller without a budget: %+v %v", p, err)
		}
		// Unpriced: refused by a budget that refuses, passed by one that allows.
		var unpriced *UnpricedModelError
		if _, err := start("import", classify.Interactive, 0, false, 0); !errors.As(err, &unpriced) || unpriced.Model != "gpt-x" || unpriced.Budget != "caller:import" {
			t.Fatalf("unpriced on import: %v, want an UnpricedModelError naming gpt-x and caller:import", err)
		}
		if p, err := start("lenient", classify.Interactive, 0, false, 0); err != nil || p.OnSettle != nil {
			t.Fatalf("unpriced on lenient: %+v %v, want a pass holding nothing", p, err)
		}
		// Bulk draws on the caller's budget and the class's.
		a, err := start("import", classify.Bulk, 60*cent, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 60¢ held of import's $1: 50¢ more waits, then times out.
		if _, err := start("import", classify.Bulk, 50*cent, true, 2*time.Second); !errors.Is(err, ErrBudgetHeld) {
			t.Fatalf("while 60¢ is held: %v, want ErrBudgetHeld", err)
		}
		// It passes as soon as the holder settles below its worst case.
		got := make(chan error, 1)
		go func() {
			p, err := start("import", classify.Bulk, 50*cent, true, 10*time.Second)
			if err == nil && !p.Held {
				err = errors.New("passed without waiting")
			}
			got <- err
		}()
		synctest.Wait()
		a.Settle(30 * cent)
		if err := <-got; err != nil {
			t.Fatalf("after the holder settled at 30¢: %v", err)
		}
		// Bulk's budget ($1.50) now holds 30¢ spent and 50¢ reserved: a
		// bulk request of 80¢ from a caller without a budget of its own
		// fits what is unspent but not beside the reservation; one of
		// $1.30 fits neither.
		var over *BudgetExceededError
		if _, err := start("other", classify.Bulk, 80*cent, true, 0); err == nil {
			t.Fatal("80¢ more on bulk passed with 80¢ of $1.50 taken")
		} else if !errors.Is(err, ErrBudgetHeld) {
			t.Fatalf("80¢ on bulk: %v, want a wait (it fits what is unspent)", err)
		}
		if _, err := start("other", classify.Bulk, 130*cent, true, 0); !errors.As(err, &over) || over.Budget != "class:bulk" || over.Spent != 30*cent {
			t.Fatalf("$1.30 on bulk: %v, want exceeded on class:bulk with 30¢ spent", err)
		}
		// A pass released without a settle (it never reached the
		// upstream) costs nothing.
		p, err := start("other", classify.Bulk, 10*cent, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
		synctest.Wait()
		use, _ := g.store.read(t.Context(), []budgetKey{{Budget: "class:bulk", Period: time.Now().UTC().Format("2006-01")}})
		if use[0] != (budgetUse{Spent: 30 * cent, Reserved: 50 * cent}) {
			t.Fatalf("bulk's budget holds %+v, want 30¢ spent and 50¢ reserved", use[0])
		}
	})
}

// TestBudgetGateUnmetered: a request that may cost money on an API whose
// answers cannot be priced is refused by a budget whose unpriced_apis is
// refuse (the default), naming it — the class's too, when the caller's own
// budget would take it — and reserves its worst case on one whose
// unpriced_apis is worst_case; a request that costs nothing passes every
// budget holding nothing, whatever its API. Before, every request that
// named a model reserved and any that named none passed free.
func TestBudgetGateUnmetered(t *testing.T) {
	g := startBudgetGate(t, NewMemoryBudgets(), nil)
	cfg := defaultGateClasses()
	cfg.Budget[classify.Bulk] = classify.Budget{USD: 1.5, Per: classify.PerMonth}
	g.Reconfigure(cfg, []classify.Caller{
		{Name: "import", Budget: classify.Budget{USD: 1, Per: classify.PerDay}},
		{Name: "images", Budget: classify.Budget{USD: 1, Per: classify.PerDay, UnpricedAPIs: classify.UnpricedAPIWorstCase}},
	})
	var unmetered *UnmeteredAPIError
	var unpriced *UnpricedModelError
	for _, tt := range []struct {
		name string
		r    Request
		// refusedBy is the budget that refuses it; reserves says it passes
		// holding a reservation, else it passes holding nothing.
		refusedBy string
		unpriced  bool
		reserves  bool
	}{
		{"unmetered, refused by the caller's budget", Request{Caller: "import", Class: classify.Interactive, Cost: cent, Priced: true, Generates: true, Unmetered: true},
			"caller:import", false, false},
		{"unmetered, worst_case on the caller: refused by the class's", Request{Caller: "images", Class: classify.Bulk, Cost: cent, Priced: true, Generates: true, Unmetered: true},
			"class:bulk", false, false},
		{"unmetered, worst_case: reserved", Request{Caller: "images", Class: classify.Interactive, Cost: cent, Priced: true, Generates: true, Unmetered: true},
			"", false, true},
		{"unmetered, worst_case, unpriced model: the unpriced policy", Request{Caller: "images", Class: classify.Interactive, Generates: true, Unmetered: true, Model: "dall-e-3"},
			"caller:images", true, false},
		{"generating, no model: unpriced", Request{Caller: "import", Class: classify.Interactive, Generates: true},
			"caller:import", true, false},
		{"free, unmetered: passes", Request{Caller: "import", Class: classify.Bulk, Cost: cent, Priced: true, Unmetered: true}, "", false, false},
		{"free, unpriced: passes", Request{Caller: "import", Class: classify.Bulk, Model: "claude-x"}, "", false, false},
		{"unmetered without a budget: passes", Request{Caller: "other", Class: classify.Interactive, Cost: cent, Priced: true, Generates: true, Unmetered: true},
			"", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := g.Start(t.Context(), tt.r, time.Now().Add(time.Second))
			switch {
			case tt.refusedBy == "":
				if err != nil || (p.OnSettle != nil) != tt.reserves {
					t.Fatalf("%v (reserved: %v), want it passed, reserving: %v", err, p.OnSettle != nil, tt.reserves)
				}
				p.Release()
			case tt.unpriced:
				if !errors.As(err, &unpriced) || unpriced.Budget != tt.refusedBy || unpriced.Model != tt.r.Model {
					t.Fatalf("%v, want an UnpricedModelError of %s", err, tt.refusedBy)
				}
			default:
				if !errors.As(err, &unmetered) || unmetered.Budget != tt.refusedBy {
					t.Fatalf("%v, want an UnmeteredAPIError of %s", err, tt.refusedBy)
				}
			}
		})
	}
}

// TestBudgetMetrics: the budget families show every configured budget's
// current period as the gate last read it — limit, spent, reserved and
// the alert threshold — by budget.
func TestBudgetMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startBudgetGate(t, NewMemoryBudgets(), nil)
		p, err := g.Start(t.Context(), Request{Caller: "import", Class: classify.Bulk, Cost: 40 * cent, Priced: true, Generates: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(BudgetRefresh) // the gate's loop reads the budgets again; the clock is the bubble's
		synctest.Wait()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewBudgetCollector(g))
		want := `
# HELP meterproxy_budget_reserved_usd What requests in flight hold reserved of a budget in US dollars (their worst case, until they settle), by budget.
# TYPE meterproxy_budget_reserved_usd gauge
meterproxy_budget_reserved_usd{budget="caller:import"} 0.4
meterproxy_budget_reserved_usd{budget="caller:lenient"} 0
meterproxy_budget_reserved_usd{budget="class:bulk"} 0.4
# HELP meterproxy_budget_spent_usd What a budget's current period has spent in US dollars (priced usage, fleet-wide with Redis), by budget; it starts again at 0 when the period resets.
# TYPE meterproxy_budget_spent_usd gauge
meterproxy_budget_spent_usd{budget="caller:import"} 0
meterproxy_budget_spent_usd{budget="caller:lenient"} 0
meterproxy_budget_spent_usd{budget="class:bulk"} 0
# HELP meterproxy_budget_alert_usd The spend at which a budget's BudgetNearlySpent alert fires: its alert_at share (0.8 unless configured), in US dollars, by budget.
# TYPE meterproxy_budget_alert_usd gauge
meterproxy_budget_alert_usd{budget="caller:import"} 0.8
meterproxy_budget_alert_usd{budget="caller:lenient"} 0.8
meterproxy_budget_alert_usd{budget="class:bulk"} 1.2
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meterproxy_budget_reserved_usd", "meterproxy_budget_spent_usd", "meterproxy_budget_alert_usd"); err != nil {
			t.Error(err)
		}
		p.Settle(25 * cent)
		time.Sleep(BudgetRefresh)
		synctest.Wait()
		for _, b := range g.State() {
			if b.Budget == "class:bulk" && (b.Spent != 0.25 || b.Reserved != 0 || b.Alert != 1.2) {
				t.Errorf("class:bulk after a settle at 25¢: %+v, want 0.25 spent, none reserved, alert at 1.2", b)
			}
		}
	})
}

// TestBudgetGateBoundsWaiters: the requests waiting at budgets are a
// class's max_queue at most on a replica (each asks the store every
// budgetPoll); one more is refused as the queue full, at once.
func TestBudgetGateBoundsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startBudgetGate(t, NewMemoryBudgets(), nil)
		cfg := defaultGateClasses()
		cfg.MaxQueue[classify.Bulk] = 1
		g.Reconfigure(cfg, []classify.Caller{{Name: "import", Budget: classify.Budget{USD: 1, Per: classify.PerDay}}})
		req := Request{Caller: "import", Class: classify.Bulk, Cost: 60 * cent, Priced: true, Generates: true}
		holder, err := g.Start(t.Context(), req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := g.Start(t.Context(), req, time.Now().Add(10*time.Second))
			waited <- err
		}()
		synctest.Wait() // the first waiter waits
		if _, err := g.Start(t.Context(), req, time.Now().Add(10*time.Second)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a second waiter with max_queue 1: %v, want ErrQueueFull", err)
		}
		holder.Settle(20 * cent)
		if err := <-waited; err != nil {
			t.Fatalf("the waiter after the holder settled: %v", err)
		}
		if n := g.waiting[classify.Bulk].Load(); n != 0 {
			t.Errorf("%d still counted waiting", n)
		}
	})
}

// budgetStoreCase is a BudgetStore a gate test runs on, and its liveness
// check (nil in process).
type budgetStoreCase struct {
	name  string
	store func(t *testing.T) (BudgetStore, func(context.Context) error)
}

// budgetStoreCases are the stores the gate's tests run on: in process and
// on a Redis of the test's own.
func budgetStoreCases() []budgetStoreCase {
	return []budgetStoreCase{
		{"in-process", func(*testing.T) (BudgetStore, func(context.Context) error) { return NewMemoryBudgets(), nil }},
		{"redis", func(t *testing.T) (BudgetStore, func(context.Context) error) {
			s := newTestRedisBudgets(t, redistest.Start(t), redistest.Prefix(t), "r1")
			return s, s.Alive
		}},
	}
}

// TestAlertUSDPrintsAsConfigured: a $3 budget alerting at 0.8 alerts at
// 2.4 in /admin/state and /metrics, not 2.4000000000000004.
func TestAlertUSDPrintsAsConfigured(t *testing.T) {
	for _, tt := range []struct{ usd, share, want float64 }{{3, 0.8, 2.4}, {1.5, 0.8, 1.2}, {100, 0.9, 90}} {
		if got := alertUSD(tt.usd, tt.share); got != tt.want {
			t.Errorf("alertUSD(%g, %g) = %v, want %v", tt.usd, tt.share, got, tt.want)
		}
	}
}
