package price

import "testing"

// TestBatchWorstCase: a batch's worst case at the batch price (half):
// its input at the dearest input price, the caps it set, and max_output
// for each request that set none.
func TestBatchWorstCase(t *testing.T) {
	p := Price{Input: 2, CacheWrite: 4, Output: 10, MaxOutput: 1000}
	tests := []struct {
		name string
		m    BatchModel
		want Nanodollars
	}{
		// 1000 × $2 (cache writes) + 500 × $5 = 4,500,000 nanodollars.
		{"capped", BatchModel{Lines: 5, Input: 1000, Output: 500}, 4_500_000},
		// 1000 × $2 + (500 + 2 × 1000) × $5 = 14,500,000.
		{"two uncapped", BatchModel{Lines: 7, Input: 1000, Output: 500, Uncapped: 2}, 14_500_000},
		{"saturated", BatchModel{Lines: 1, Input: 1 << 62, Uncapped: 1 << 62}, p.WorstCase(1<<48, 1<<48, TierBatch)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.BatchWorst(tt.m); got != tt.want {
				t.Errorf("BatchWorst(%+v) = %d, want %d", tt.m, got, tt.want)
			}
		})
	}
	var f BatchFile
	for i := range MaxBatchModels + 1 {
		f.Add(string(rune('a'+i)), 1, 0)
	}
	if len(f.Models) != MaxBatchModels || f.Unmetered == "" {
		t.Errorf("a file of %d models: %d counted, unmetered %q; want %d and unmetered", MaxBatchModels+1, len(f.Models), f.Unmetered, MaxBatchModels)
	}
}
