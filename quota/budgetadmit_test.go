package quota

import (
	"testing"
	"testing/synctest"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestAdmitterSpends: Admit prices a request at its model's price and
// reserves its worst case on its budgets; Lease.Settle charges the priced
// usage instead, or the worst case for a usage that is Worst (a response
// that cannot say what it cost), and a lease released without usage
// charges nothing.
func TestAdmitterSpends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Prices = []price.Price{{Match: []string{"gpt-4o"}, Input: 2.5, Output: 10}}
		a := runAdmitter(t, cfg, []classify.Caller{{Name: "import", Class: classify.Bulk, Budget: classify.Budget{USD: 1, Per: classify.PerMonth}}})
		req := Request{Class: classify.Bulk, Caller: "import", Model: Model{Name: "gpt-4o"}, CostBounds: CostBounds{InputTokens: 1000, OutputTokens: 500}}
		// The worst case: 1000 × $2.50/M + 500 × $10/M = $0.0075.
		spent := func() price.Nanodollars { return price.FromDollars(budgetAfterRefresh(t, a, "caller:import").Spent) }
		l, err := a.Admit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Settle(Outcome{Status: 200, Usage: &Usage{Priced: price.Usage{Input: 1000, Output: 100}, Charged: true}}); !got.Priced || got.Cost != 3_500_000 {
			t.Errorf("Settle: %s %v, want $0.0035", got.Cost, got.Priced)
		}
		l.Release()
		if got := spent(); got != 3_500_000 {
			t.Errorf("after Settle: %s spent, want $0.0035", got)
		}
		l, err = a.Admit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Settle(Outcome{Status: 200, Usage: &Usage{Priced: price.Usage{Input: 100}, Worst: true, Charged: true}}); got.Cost != 7_500_000 {
			t.Errorf("Settle at the worst case: %s, want the worst case $0.0075", got.Cost)
		}
		l.Release()
		if got := spent(); got != 11_000_000 {
			t.Errorf("after the worst-case Settle: %s spent, want $0.011", got)
		}
		l, err = a.Admit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if got := spent(); got != 11_000_000 {
			t.Errorf("after a release without a spend: %s spent, want $0.011 still", got)
		}
	})
}
