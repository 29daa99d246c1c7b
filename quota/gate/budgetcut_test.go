package gate

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// hiddenReq is a request of caller import (a $1 daily budget; bulk's is
// $1.50) whose worst case is cost and whose body shows floor of it.
func hiddenReq(cost, floor price.Nanodollars) Request {
	return Request{Caller: "import", Class: classify.Bulk, Cost: cost, Floor: floor, Priced: true, Generates: true}
}

// importUse reads caller import's budget today.
func importUse(t *testing.T, g *BudgetGate) budgetUse {
	t.Helper()
	use, err := g.store.read(t.Context(), []budgetKey{{Budget: "caller:import", Period: time.Now().UTC().Format("2006-01-02")}})
	if err != nil {
		t.Fatal(err)
	}
	return use[0]
}

// TestBudgetGateCutsHiddenInput: a request whose input is hidden, whose
// worst case ($3) is more than its budget has left, is not refused: it
// waits for the reservations in flight to settle, then reserves all that
// is unspent, and holding it every other request waits; once it settled
// above the budget the rest are refused. One whose body alone does not
// fit what is unspent is refused as before, and a request whose input is
// not hidden is never cut.
func TestBudgetGateCutsHiddenInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startBudgetGate(t, NewMemoryBudgets(), nil)
		other, err := g.Start(t.Context(), hiddenReq(30*cent, 0), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// $3 hidden beside 30¢ reserved: it waits for them.
		if _, err := g.Start(t.Context(), hiddenReq(300*cent, 5*cent), time.Now()); !errors.Is(err, ErrBudgetHeld) {
			t.Fatalf("a hidden-input request beside a reservation: %v, want it held (ErrBudgetHeld)", err)
		}
		got := make(chan Pass, 1)
		go func() {
			p, err := g.Start(t.Context(), hiddenReq(300*cent, 5*cent), time.Now().Add(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		synctest.Wait()
		if u := importUse(t, g); u != (budgetUse{Reserved: 30 * cent}) {
			t.Fatalf("import holds %+v while the hidden request waits, want the 30¢ only", u)
		}
		other.Settle(10 * cent)
		a := <-got
		if u := importUse(t, g); u != (budgetUse{Spent: 10 * cent, Reserved: 90 * cent}) {
			t.Fatalf("import holds %+v, want 10¢ spent and the 90¢ unspent reserved", u)
		}
		// Nothing is free: another hidden one and a plain one wait.
		for _, r := range []Request{hiddenReq(300*cent, 5*cent), hiddenReq(5*cent, 0)} {
			if _, err := g.Start(t.Context(), r, time.Now().Add(time.Second)); !errors.Is(err, ErrBudgetHeld) {
				t.Errorf("%+v while the budget is all reserved: %v, want ErrBudgetHeld", r, err)
			}
		}
		// A plain request of more than is unspent is refused, uncut.
		var over *BudgetExceededError
		if _, err := g.Start(t.Context(), hiddenReq(91*cent, 0), time.Now()); !errors.As(err, &over) || over.Cost != 91*cent {
			t.Errorf("a 91¢ request without hidden input: %v, want exceeded at its worst case", err)
		}
		a.Settle(120 * cent) // it read more than the budget had left
		synctest.Wait()
		if u := importUse(t, g); u != (budgetUse{Spent: 130 * cent}) {
			t.Fatalf("import after both settled: %+v, want $1.30 spent, nothing reserved", u)
		}
		// Spent past the budget: refused, its floor named as its cost.
		if _, err := g.Start(t.Context(), hiddenReq(300*cent, 5*cent), time.Now()); !errors.As(err, &over) || over.Cost != 5*cent {
			t.Errorf("a hidden-input request after the budget is spent: %v, want exceeded at its floor (5¢)", err)
		}
	})
}

// TestBudgetGateCutsToTheTightest: a hidden-input request's reservation
// is cut to the least its budgets have unspent (here bulk's, spent by
// another caller), and refused when that is below its floor.
func TestBudgetGateCutsToTheTightest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startBudgetGate(t, NewMemoryBudgets(), nil)
		x, err := g.Start(t.Context(), Request{Caller: "x", Class: classify.Bulk, Cost: 140 * cent, Priced: true, Generates: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		x.Settle(140 * cent)
		synctest.Wait()
		p, err := g.Start(t.Context(), hiddenReq(300*cent, 5*cent), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if u := importUse(t, g); u.Reserved != 10*cent {
			t.Errorf("import holds %+v, want the 10¢ bulk has unspent reserved", u)
		}
		p.Release()
		var over *BudgetExceededError
		if _, err := g.Start(t.Context(), hiddenReq(300*cent, 11*cent), time.Now()); !errors.As(err, &over) || over.Budget != "class:bulk" || over.Cost != 11*cent {
			t.Errorf("a floor of 11¢ with 10¢ unspent on bulk: %v, want exceeded on class:bulk at 11¢", err)
		}
	})
}

// TestBudgetGateHiddenInputBound: 20 hidden-input requests at once, each
// reserving a worst case of $3 and really costing 40¢ to 70¢, on a $1
// budget (and bulk's $1.50), in process and on Redis: what they spend
// passes the budget by at most one request's cost, and once it is spent
// every one is refused.
func TestBudgetGateHiddenInputBound(t *testing.T) {
	for _, c := range budgetStoreCases() {
		t.Run(c.name, func(t *testing.T) {
			store, alive := c.store(t)
			g := startBudgetGate(t, store, alive)
			var spent, served, exceeded atomic.Int64
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					p, err := g.Start(t.Context(), hiddenReq(300*cent, cent), time.Now().Add(10*time.Second))
					var over *BudgetExceededError
					switch {
					case errors.As(err, &over):
						exceeded.Add(1)
						return
					case err != nil:
						t.Error(err)
						return
					}
					cost := price.Nanodollars(40+i*3/2) * cent
					spent.Add(int64(cost))
					served.Add(1)
					p.Settle(cost)
				})
			}
			wg.Wait()
			waitSettled(t, g)
			t.Logf("%d served, %s spent; %d refused", served.Load(), price.Nanodollars(spent.Load()), exceeded.Load())
			if s := price.Nanodollars(spent.Load()); s > 100*cent+70*cent || s < 99*cent {
				t.Errorf("%s spent of a $1 budget by requests of at most 70¢ (a floor of 1¢): want $0.99 at least and at most $1.70", s)
			}
			if exceeded.Load()+served.Load() != 20 {
				t.Errorf("%d served and %d refused as exceeded of 20", served.Load(), exceeded.Load())
			}
			if u := importUse(t, g); u.Spent != price.Nanodollars(spent.Load()) || u.Reserved != 0 {
				t.Errorf("the store holds %+v, want the %s spent, nothing reserved", u, price.Nanodollars(spent.Load()))
			}
		})
	}
}

// waitSettled waits for g's loop to make every settle handed to it: each
// time it settles it closes the channel it replaces.
func waitSettled(t *testing.T, g *BudgetGate) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		g.mu.Lock()
		settled := g.settled
		g.mu.Unlock()
		if g.held.Load() == 0 {
			return
		}
		select {
		case <-settled:
		case <-deadline:
			t.Fatalf("%d reservations still unsettled", g.held.Load())
		}
	}
}
