package price

import (
	"fmt"
	"math"
)

// Nanodollars is an amount of money in billionths of a US dollar: prices,
// costs, spend and budgets. An integer so that spend sums exactly — in
// Redis with HINCRBY as in process — whatever the order requests settle
// in: a $1 budget is 1e9, a request of 100 tokens at $2.50 per million
// 250,000, and an int64 holds $9.2e9. Arithmetic on it saturates
// (Plus) and never goes below 0.
type Nanodollars int64

// maxMoney is the most any amount may hold: far above any budget, with
// headroom so that a sum of two never overflows.
const maxMoney = Nanodollars(math.MaxInt64 / 4)

// Dollars returns n as dollars, for metrics and messages.
func (n Nanodollars) Dollars() float64 { return float64(n) / 1e9 }

// String formats n as dollars with the cents and as many further digits as
// it has, up to the nanodollar: "$1.50", "$0.00025".
func (n Nanodollars) String() string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	s := fmt.Sprintf("%d.%09d", n/1e9, n%1e9)
	for s[len(s)-1] == '0' && s[len(s)-3] != '.' { // down to the cents
		s = s[:len(s)-1]
	}
	return sign + "$" + s
}

// FromDollars converts a configured amount in dollars, finite and ≥ 0,
// to Nanodollars, rounding to the nearest and saturating at maxMoney.
func FromDollars(usd float64) Nanodollars {
	n := math.Round(usd * 1e9)
	if !(n < float64(maxMoney)) { // NaN too
		return maxMoney
	}
	return Nanodollars(max(n, 0))
}

// Plus is n + b, each clamped to [0, maxMoney], saturating at maxMoney.
func (n Nanodollars) Plus(b Nanodollars) Nanodollars {
	n, b = min(max(n, 0), maxMoney), min(max(b, 0), maxMoney)
	return min(n+b, maxMoney)
}
