package quota

import (
	"testing"
	"testing/synctest"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestReservationClampsToMaxOutput: a request asking for more output than
// its price's max_output reserves at max_output for each answer it asks
// for (issue 32: max_tokens far above what the model generates held a
// budget's room for nothing); a price without max_output, or a request
// within it, reserves what it asks.
func TestReservationClampsToMaxOutput(t *testing.T) {
	capped := price.Price{Match: []string{"capped"}, Input: 1, Output: 10, MaxOutput: 16_384}
	unset := price.Price{Match: []string{"unset"}, Input: 1, Output: 10}
	for _, tt := range []struct {
		name  string
		price price.Price
		req   Request
		want  price.Nanodollars // 100 input at $1/M (100,000) + output at $10/M
	}{
		{"above max_output", capped, Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 1_000_000}}, 100_000 + 163_840_000},
		{"within max_output", capped, Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 1000}}, 100_000 + 10_000_000},
		{"n=3 above max_output each", capped, Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 3_000_000, Generations: 3}}, 100_000 + 3*163_840_000},
		{"n=3 within max_output each", capped, Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 30_000, Generations: 3}}, 100_000 + 300_000_000},
		{"no cap: max_output", capped, Request{CostBounds: CostBounds{InputTokens: 100}}, 100_000 + 163_840_000},
		{"max_output unset: what it asks", unset, Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 1_000_000}}, 100_000 + 10_000_000_000},
		{"hidden input, above max_output", price.Price{Input: 1, Output: 10, MaxOutput: 16_384, MaxInput: 1000},
			Request{CostBounds: CostBounds{InputTokens: 100, OutputTokens: 1_000_000, HiddenInput: true}}, 1_000_000 + 163_840_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := reservation(&tt.price, tt.req); got != tt.want {
				t.Errorf("reservation = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestAdmitterReservesAtMaxOutput: through Admit, a budgeted request
// asking a million output tokens of a model whose max_output is 16,384
// reserves 16,384 tokens' worth, and Admitter.WorstCase agrees.
func TestAdmitterReservesAtMaxOutput(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Prices = []price.Price{{Match: []string{"capped"}, Input: 1, Output: 10, MaxOutput: 16_384}}
	callers := []classify.Caller{{Name: "import", Class: classify.Bulk, Budget: classify.Budget{USD: 1, Per: classify.PerMonth}}}
	req := Request{Model: Model{Name: "capped"}, Class: classify.Bulk, Caller: "import", CostBounds: CostBounds{InputTokens: 100, OutputTokens: 1_000_000}}
	const want price.Nanodollars = 100_000 + 163_840_000 // $0.16: a million tokens would be $10, ten times the budget
	synctest.Test(t, func(t *testing.T) {
		a := runAdmitter(t, cfg, callers)
		if got, _ := a.WorstCase(req); got != want {
			t.Errorf("WorstCase = %s, want %s", got, want)
		}
		l, err := a.Admit(t.Context(), req)
		if err != nil {
			t.Fatalf("admit: %v (a reservation at what max_tokens asks would not fit the $1 budget)", err)
		}
		defer l.Release()
		if got := price.FromDollars(budgetAfterRefresh(t, a, "caller:import").Reserved); got != want {
			t.Errorf("reserved %s, want %s", got, want)
		}
	})
}
