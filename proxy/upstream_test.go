package proxy

import (
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// TestSettleEstimateNotBelowCharge: an estimated usage (no usage in the
// answer, or a stream cut before it) never settles a lease below what
// admission charged — an estimate that under-counts would otherwise free
// tokens the provider spent (issue 21 item 4); a reported usage settles to
// what it says, up or down; a dialect that does not settle does not.
func TestSettleEstimateNotBelowCharge(t *testing.T) {
	const cost = 30015
	tests := []struct {
		name   string
		settle settling
		u      usage.Usage
		want   int64
		ok     bool
	}{
		{"estimate below the charge keeps the charge", settleTotal, usage.Usage{Input: 10, Output: 5, Estimated: true}, cost, true},
		{"estimate above the charge settles up", settleTotal, usage.Usage{Input: 30000, Output: 100, Estimated: true}, 30100, true},
		{"reported usage settles down", settleTotal, usage.Usage{Input: 10, Output: 5}, 15, true},
		{"reported usage settles up", settleTotal, usage.Usage{Input: 30000, Output: 100}, 30100, true},
		{"input budget: estimated input below the charge", settleInput, usage.Usage{Input: 10, Output: 500, Estimated: true}, cost, true},
		{"input budget: reported input", settleInput, usage.Usage{Input: 10, Output: 500}, 10, true},
		{"not settled", settleNone, usage.Usage{Input: 10, Output: 5, Estimated: true}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &exchange{cost: cost, settle: tt.settle}
			got, ok := ex.settleTo(tt.u)
			if got != tt.want || ok != tt.ok {
				t.Errorf("settleTo(%+v) = %d, %v; want %d, %v", tt.u, got, ok, tt.want, tt.ok)
			}
		})
	}
}
