package quota

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestUnheld: a request nobody held is granted at once though its pool's
// in-flight bound is full, counts in flight until released, charges its
// tokens to the window after the fact (a later request waits for them),
// and charges its cost to its budgets past their limit; CheckBudgets then
// says the budget is spent, reserving nothing.
func TestUnheld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.MaxInFlight = 1
		cfg.Account.TokensPerMinute = 60_000 // 1,000 a second
		cfg.Prices = []price.Price{{Match: []string{"gpt-realtime"}, Input: 4, Output: 16}}
		a := runAdmitter(t, cfg, []classify.Caller{{Name: "voice", Class: classify.Interactive,
			Budget: classify.Budget{USD: 0.01, Per: classify.PerMonth}}})
		req := Request{Class: classify.Interactive, Caller: "voice", Model: Model{Name: "gpt-realtime"}, Tokens: 100, CostBounds: CostBounds{InputTokens: 100, OutputTokens: 100}}
		if err := a.CheckBudgets(t.Context(), req); err != nil {
			t.Fatalf("CheckBudgets before any spend: %v", err)
		}
		held, err := a.Admit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		u := a.Unheld(req)
		if got := a.first().InFlight(classify.Interactive); got != 2 {
			t.Errorf("in flight %d beside a bound of 1, want 2: an unheld request is never held", got)
		}
		// 2,000 input and 400 output tokens: $0.008 + $0.0064, past the
		// $0.01 budget.
		if got := u.Settle(Outcome{Status: 200, Usage: &Usage{Priced: price.Usage{Input: 2000, Output: 400}, Tokens: 2400, Settles: true, Charged: true}}); !got.Priced || got.Cost != 14_400_000 {
			t.Errorf("Settle: %s %v, want $0.0144", got.Cost, got.Priced)
		}
		u.Release()
		held.Settle(Outcome{Unsent: true})
		held.Release()
		if got := a.first().InFlight(classify.Interactive); got != 0 {
			t.Errorf("in flight %d after both released", got)
		}
		time.Sleep(gate.BudgetRefresh) // the budget loop settles and reads again
		synctest.Wait()
		var spent float64
		for _, b := range a.State().Budgets {
			if b.Budget == "caller:voice" {
				spent = b.Spent
			}
		}
		if spent != 0.0144 {
			t.Errorf("caller:voice spent $%g, want $0.0144 (past its $0.01)", spent)
		}
		var exceeded *gate.BudgetExceededError
		if err := a.CheckBudgets(t.Context(), req); !errors.As(err, &exceeded) || exceeded.Budget != "caller:voice" {
			t.Errorf("CheckBudgets after the spend: %v, want caller:voice exceeded", err)
		}
		// The window took the 2,400 tokens: a request of 100 more waits for
		// a later second.
		free := req
		free.Free = true
		start := time.Now()
		l, err := a.Admit(t.Context(), free)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if waited := time.Since(start); waited < time.Second {
			t.Errorf("admitted after %s: the unheld request's tokens were not charged to the window", waited)
		}
	})
}
