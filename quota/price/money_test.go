package price

import (
	"math"
	"testing"
)

// TestMoney: dollars convert to nanodollars rounded and saturated, sums
// saturate, and String shows the cents and the digits there are.
func TestMoney(t *testing.T) {
	for _, c := range []struct {
		usd  float64
		want Nanodollars
		text string
	}{
		{0, 0, "$0.00"}, {1, 1e9, "$1.00"}, {1.5, 1_500_000_000, "$1.50"}, {0.00025, 250_000, "$0.00025"},
		{200, 200e9, "$200.00"}, {1e-10, 0, "$0.00"}, {-1, 0, "$0.00"},
		{math.Inf(1), maxMoney, maxMoney.String()}, {math.NaN(), maxMoney, maxMoney.String()},
	} {
		got := FromDollars(c.usd)
		if got != c.want || got.String() != c.text {
			t.Errorf("FromDollars(%g) = %d (%s), want %d (%s)", c.usd, got, got, c.want, c.text)
		}
	}
	if got := Nanodollars(-1_250_000_000).String(); got != "-$1.25" {
		t.Errorf("String of -1.25 dollars = %q", got)
	}
	if got := maxMoney.Plus(maxMoney); got != maxMoney {
		t.Errorf("max.Plus(max) = %d, want %d", got, maxMoney)
	}
	if got := Nanodollars(-5).Plus(7); got != 7 {
		t.Errorf("Nanodollars(-5).Plus(7) = %d, want 7", got)
	}
}
