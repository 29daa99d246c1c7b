package quota

import (
	"sync/atomic"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// settleLease is a lease charged cost tokens in a pool of 60,000 tokens
// and 6,000 output tokens a minute, priced at $1 per million input and
// $2 per million output tokens with a worst case of worst, whose budget
// settlement is recorded in *charged (-1: none).
func settleLease(cost int64, worst price.Nanodollars, charged *price.Nanodollars) *Lease {
	limits := &atomic.Pointer[limitSet]{}
	limits.Store(&limitSet{enforced: store.Limits{AccountTPM: 60000, OutputLimits: store.OutputLimits{OutputTPM: 6000}}})
	g := &ledger{limits: limits, sig: &signals{arrive: make(chan struct{}, 1), freed: make(chan struct{}, 1)}}
	*charged = -1
	return &Lease{leases: g, class: classify.Interactive, cost: cost, leasePrice: leasePrice{price: &price.Price{Input: 1, Output: 2}, worst: worst},
		gate: gate.Pass{OnSettle: func(c price.Nanodollars) { *charged = c }}}
}

// TestSettlePolicy pins what a lease's one settlement (Lease.Settle)
// does with each outcome the proxy reports, decided in quota alone: a
// refusal or a request that never left gives its token charge back and
// charges nothing; one that may have reached the provider without an
// answer keeps its charge; reported usage settles the charge to it, up
// or down, an estimate never below the charge; a provider that settles
// nothing keeps the charge; a cost the usage cannot bound charges the
// budgets the worst case; only a Measured answer counts for the adaptive
// bound, and its output as work only after a 2xx; a caller's own key's
// answer charges no budget; a shadow lease charges its budgets alone;
// and a lease settles once.
func TestSettlePolicy(t *testing.T) {
	const cost, worst, priced = 30015, price.Nanodollars(90_000_000), price.Nanodollars(1_200_000) // 1,000 input and 100 output tokens
	reported := func(tokens int64) *Usage {
		return &Usage{Priced: price.Usage{Input: 1000, Output: 100}, Tokens: tokens, Settles: true, Charged: true}
	}
	estimated := func(tokens int64) *Usage { u := reported(tokens); u.Estimated = true; return u }
	tests := []struct {
		name       string
		o          Outcome
		correction int64             // to the window: settled minus charged
		output     int64             // counted for output_tokens_per_minute
		answer     int32             // 1 + the status the adaptive bound counts (0: none)
		work       int64             // output counted as the adaptive bound's work
		charged    price.Nanodollars // to the budgets (-1: nothing settled)
	}{
		{"refused 429: charge given back", Outcome{Status: 429, Measured: true}, -cost, 0, 430, 0, -1},
		{"refused 400 with a caller's own key", Outcome{Status: 400}, -cost, 0, 0, 0, -1},
		{"never sent: charge given back", Outcome{Unsent: true, Measured: true}, -cost, 0, 1, 0, -1},
		{"no answer, maybe sent: charge kept", Outcome{Measured: true}, 0, 0, 1, 0, -1},
		{"success without usage: charge kept", Outcome{Status: 200, Measured: true}, 0, 0, 201, 0, -1},
		{"reported usage settles down", Outcome{Status: 200, Measured: true, Usage: reported(15)}, 15 - cost, 100, 201, 100, priced},
		{"reported usage settles up", Outcome{Status: 200, Measured: true, Usage: reported(30100)}, 30100 - cost, 100, 201, 100, priced},
		{"estimate below the charge keeps the charge", Outcome{Status: 200, Measured: true, Usage: estimated(115)}, 0, 100, 201, 100, priced},
		{"estimate above the charge settles up", Outcome{Status: 200, Measured: true, Usage: estimated(30100)}, 30100 - cost, 100, 201, 100, priced},
		{"a provider that settles nothing", Outcome{Status: 200, Measured: true, Usage: &Usage{Tokens: 15, Priced: price.Usage{Output: 100}, Charged: true}}, 0, 100, 201, 100, 200_000},
		{"cut before its usage: the worst case", Outcome{Status: 200, Measured: true, Usage: func() *Usage { u := estimated(115); u.Worst = true; return u }()}, 0, 100, 201, 100, worst},
		{"not measured: no work", Outcome{Status: 200, Usage: reported(15)}, 15 - cost, 100, 0, 0, priced},
		{"cut before any answer", Outcome{Measured: true, Usage: estimated(115)}, 0, 100, 1, 0, priced},
		{"a caller's own key's usage: no budget", Outcome{Status: 200, Usage: func() *Usage { u := reported(15); u.Charged = false; return u }()}, 15 - cost, 100, 0, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var charged price.Nanodollars
			s := settleLease(cost, worst, &charged)
			got := s.Settle(tt.o)
			g := s.leases
			if c := g.corrections[classify.Interactive].Load(); c != tt.correction {
				t.Errorf("correction %d, want %d", c, tt.correction)
			}
			if o := g.output.Load(); o != tt.output {
				t.Errorf("output %d, want %d", o, tt.output)
			}
			if a := s.answer.Load(); a != tt.answer {
				t.Errorf("answer %d, want %d", a, tt.answer)
			}
			if w := g.adapt.work.Load(); w != tt.work {
				t.Errorf("work %d, want %d", w, tt.work)
			}
			if charged != tt.charged {
				t.Errorf("budgets charged %d, want %d", charged, tt.charged)
			}
			if want := tt.charged >= 0; got.Charged != want || want && (got.Cost != charged || !got.Priced) {
				t.Errorf("Settle = %+v, want what the budgets were charged (%d)", got, tt.charged)
			}
			if again := s.Settle(Outcome{Unsent: true, Measured: true, Usage: reported(1)}); again != (Settled{}) ||
				g.corrections[classify.Interactive].Load() != tt.correction || s.answer.Load() != tt.answer {
				t.Errorf("a second Settle changed the lease: %+v", again)
			}
		})
	}
}
