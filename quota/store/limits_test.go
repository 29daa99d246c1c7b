package store

import (
	"math/rand/v2"
	"testing"
)

func TestAllowance(t *testing.T) {
	tests := []struct {
		name string
		rpm  int64
		secs []int64 // allowance of seconds 0..len-1
	}{
		{"one per second", 60, []int64{1, 1, 1, 1}},
		{"12 rpm is one every fifth second", 12, []int64{0, 0, 0, 0, 1, 0, 0, 0, 0, 1}},
		{"1.5 per second alternates", 90, []int64{1, 2, 1, 2}},
		{"133.33 per second", 8000, []int64{133, 133, 134, 133, 133, 134}},
		{"zero rpm admits nothing", 0, []int64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for sec, want := range tt.secs {
				if got := Allowance(int64(sec), tt.rpm); got != want {
					t.Errorf("Allowance(%d, %d) = %d, want %d", sec, tt.rpm, got, want)
				}
			}
		})
	}
}

// TestAllowanceRuns checks the rule of docs/rules.md: any run of N seconds
// admits N·r ± 1, and a positive rate never admits zero forever.
func TestAllowanceRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: seeded, reproducible inputs for a property test, not security
	for range 2000 {
		rpm := rng.Int64N(100000) + 1
		start := rng.Int64N(2_000_000_000)
		n := rng.Int64N(600) + 1
		var sum int64
		for s := start; s < start+n; s++ {
			sum += Allowance(s, rpm)
		}
		exact := float64(n) * float64(rpm) / 60
		if d := float64(sum) - exact; d > 1 || d < -1 {
			t.Fatalf("rpm %d, %d seconds from %d: admitted %d, want %.2f ± 1", rpm, n, start, sum, exact)
		}
	}
	// r < 1: some second within ceil(60/rpm) admits one.
	for rpm := int64(1); rpm < 60; rpm++ {
		var sum int64
		for s := range 60/rpm + 1 {
			sum += Allowance(1_700_000_000+s, rpm)
		}
		if sum == 0 {
			t.Errorf("rpm %d admitted nothing in %d seconds", rpm, 60/rpm+1)
		}
	}
}
