package proxy

import (
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestSettledBy: what the proxy reads off the wire for a lease's
// settlement (exchange.settledBy) — the usage in tokens as its dialect
// counts them and whether the dialect settles at all, whether it was
// estimated, whether it cannot bound the cost (a cut or background answer
// without usage: the worst case), whether it spent this account. What
// that settles the lease to (an estimate never below the charge, …) is
// quota's alone (quota.Lease.Settle, TestSettlePolicy there).
func TestSettledBy(t *testing.T) {
	reported, estimated := usage.Usage{Input: 10, Output: 5}, usage.Usage{Input: 10, Output: 5, Estimated: true}
	tests := []struct {
		name string
		ex   *exchange
		u    usage.Usage
		cut  bool
		want quota.Usage
	}{
		{"total", &exchange{ask: asked{settle: settleTotal}, dest: destination{spent: true}}, reported, false, quota.Usage{Tokens: 15, Settles: true, Charged: true}},
		{"input budget", &exchange{ask: asked{settle: settleInput}, dest: destination{spent: true}}, reported, false, quota.Usage{Tokens: 10, Settles: true, Charged: true}},
		{"not settled", &exchange{ask: asked{settle: settleNone}, dest: destination{spent: true}}, reported, false, quota.Usage{Tokens: 15, Charged: true}},
		{"estimated, whole", &exchange{ask: asked{settle: settleTotal}, dest: destination{spent: true}}, estimated, false, quota.Usage{Tokens: 15, Settles: true, Estimated: true, Charged: true}},
		{"estimated, cut", &exchange{ask: asked{settle: settleTotal}, dest: destination{spent: true}}, estimated, true, quota.Usage{Tokens: 15, Settles: true, Estimated: true, Worst: true, Charged: true}},
		{"reported, cut after it", &exchange{ask: asked{settle: settleTotal}, dest: destination{spent: true}}, reported, true, quota.Usage{Tokens: 15, Settles: true, Charged: true}},
		{"background without usage", &exchange{ask: asked{settle: settleTotal, background: true}, dest: destination{spent: true}}, estimated, false, quota.Usage{Tokens: 15, Settles: true, Estimated: true, Worst: true, Charged: true}},
		{"a caller's own key", &exchange{ask: asked{settle: settleTotal}}, reported, false, quota.Usage{Tokens: 15, Settles: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.ex.settledBy(tt.u, tt.cut)
			tt.want.Priced = price.Usage{Input: 10, Output: 5}
			if *got != tt.want {
				t.Errorf("settledBy(%+v, cut %v) = %+v, want %+v", tt.u, tt.cut, *got, tt.want)
			}
		})
	}
}
