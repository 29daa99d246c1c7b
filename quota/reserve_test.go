package quota

import (
	"testing"
	"testing/synctest"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestAdmitterReservesMaxInput: Admit reserves a hidden-input request's
// input at its price's max_input — set, or its model family's context
// window, or the fallback for a long context — and a settlement at the
// worst case (Usage.Worst) charges the whole of that worst case, or the
// usage if dearer, even when the budget cut the reservation.
func TestAdmitterReservesMaxInput(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Prices = []price.Price{
		{Match: []string{"gpt-4o*"}, Input: 2.5, Output: 10},
		{Match: []string{"claude*"}, Input: 3, Output: 15},
		{Match: []string{"set"}, Input: 1, Output: 1, MaxInput: 1000},
	}
	callers := []classify.Caller{{Name: "import", Class: classify.Bulk, Budget: classify.Budget{USD: 100, Per: classify.PerMonth}}}
	for _, tt := range []struct {
		name   string
		req    Request
		worst  price.Nanodollars
		usage  price.Usage
		charge price.Nanodollars
	}{
		{"gpt-4o, input shown", Request{Model: Model{Name: "gpt-4o"}, CostBounds: CostBounds{InputTokens: 100, OutputTokens: 50}},
			750_000, price.Usage{Input: 50_000}, 125_000_000}, // the usage is dearer than the worst case
		{"gpt-4o, hidden: 128,000", Request{Model: Model{Name: "gpt-4o-mini"}, CostBounds: CostBounds{InputTokens: 100, OutputTokens: 50, HiddenInput: true}},
			320_500_000, price.Usage{Input: 100}, 320_500_000},
		{"claude, hidden: 200,000", Request{Model: Model{Name: "claude-sonnet-4-5"}, CostBounds: CostBounds{InputTokens: 10, OutputTokens: 100, HiddenInput: true}},
			601_500_000, price.Usage{}, 601_500_000},
		{"claude, hidden, long context: 2^20", Request{Model: Model{Name: "claude-sonnet-4-5"}, CostBounds: CostBounds{InputTokens: 10, OutputTokens: 100, HiddenInput: true, LongContext: true}},
			3_147_228_000, price.Usage{}, 3_147_228_000},
		{"max_input set", Request{Model: Model{Name: "set"}, CostBounds: CostBounds{InputTokens: 10, OutputTokens: 10, HiddenInput: true}},
			1_010_000, price.Usage{}, 1_010_000},
		{"an estimate above max_input", Request{Model: Model{Name: "set"}, CostBounds: CostBounds{InputTokens: 5000, OutputTokens: 10, HiddenInput: true}},
			5_010_000, price.Usage{}, 5_010_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := runAdmitter(t, cfg, callers)
				reserved := func() price.Nanodollars {
					return price.FromDollars(budgetAfterRefresh(t, a, "caller:import").Reserved)
				}
				tt.req.Class, tt.req.Caller = classify.Bulk, "import"
				l, err := a.Admit(t.Context(), tt.req)
				if err != nil {
					t.Fatal(err)
				}
				if got := reserved(); got != tt.worst {
					t.Errorf("reserved %s, want %s", got, tt.worst)
				}
				if got := l.Settle(Outcome{Status: 200, Usage: &Usage{Priced: tt.usage, Worst: true, Charged: true}}); got.Cost != tt.charge {
					t.Errorf("Settle at the worst case (%+v) = %s, want %s", tt.usage, got.Cost, tt.charge)
				}
				l.Release()
				if got := reserved(); got != 0 {
					t.Errorf("%s still reserved after the release", got)
				}
			})
		})
	}
}
