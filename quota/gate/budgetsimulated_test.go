package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// TestBudgetGateSimulatedReservesNothing (issue 37 item 1): a shadow
// decision's request (Simulated) is refused as a reservation would be
// where what the budget has unspent cannot hold it, and otherwise passes
// holding nothing: other simulated requests are never made to wait
// behind it, and the budget shows nothing reserved — in process and on
// Redis.
func TestBudgetGateSimulatedReservesNothing(t *testing.T) {
	for _, c := range budgetStoreCases() {
		t.Run(c.name, func(t *testing.T) {
			store, alive := c.store(t)
			g := startBudgetGate(t, store, alive)
			ctx := context.Background()
			until := time.Now().Add(time.Second)
			r := Request{Caller: "import", Class: classify.Bulk, Cost: 60 * cent, Priced: true, Generates: true, Simulated: true}
			for i := range 3 { // $1.80 of worst cases on a $1 budget: none waits, none is refused
				p, err := g.Start(ctx, r, until)
				if err != nil || p.OnRelease != nil || p.OnSettle != nil {
					t.Fatalf("simulated request %d: pass %+v, %v; want a pass that holds nothing", i, p, err)
				}
			}
			keys := periods(g.budgets.Load().of("import", classify.Bulk), g.now())
			uses, err := store.read(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, u := range uses {
				if u.Reserved != 0 || u.Spent != 0 {
					t.Errorf("%s: %+v after simulated requests, want nothing reserved or spent", keys[i].Budget, u)
				}
			}

			g.ChargePass("import", classify.Bulk).Settle(50 * cent) // what a forwarded request spent
			waitSettled(t, g)
			_, err = g.Start(ctx, r, until)
			var exceeded *BudgetExceededError
			if !errors.As(err, &exceeded) || exceeded.Budget != "caller:import" || exceeded.Cost != 60*cent {
				t.Fatalf("a 60¢ simulated request on a $1 budget with 50¢ spent: %v, want caller:import exceeded", err)
			}
			r.Cost = 40 * cent
			if _, err := g.Start(ctx, r, until); err != nil {
				t.Fatalf("a 40¢ simulated request with 50¢ left: %v, want it passed", err)
			}
		})
	}
}
