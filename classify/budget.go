package classify

import (
	"math"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// Budget is a spend budget: at most USD dollars of priced usage per UTC
// day or month, on a caller (callers[].budget) or a class
// (classes.<class>.budget). Package quota enforces it; the zero value is
// no budget.
type Budget struct {
	// USD is the most the budget's requests may cost in a period, in US
	// dollars: 0 < USD <= 1,000,000 when the budget is set.
	USD float64 `koanf:"usd"`
	// Per is the period the budget counts over: day or month, in UTC.
	Per BudgetPeriod `koanf:"per"`
	// Unpriced is what happens to a request of the budget's for a model
	// no prices entry matches: refuse (the default: a budget that cannot
	// price a request cannot hold it) or allow (it passes, costing $0).
	Unpriced UnpricedPolicy `koanf:"unpriced"`
	// UnpricedAPIs is what happens to a request of the budget's that may
	// cost money on an API whose answers the proxy cannot price (images,
	// audio, anything but chat, legacy and Responses completions,
	// embeddings and Anthropic Messages): refuse (the default) or
	// worst_case (it passes, charged its worst case, as reserved); refused,
	// it gets a 400 unmetered_api.
	UnpricedAPIs UnpricedAPIPolicy `koanf:"unpriced_apis"`
	// AlertAt is the share of the budget spent at which the
	// BudgetNearlySpent alert fires (meterproxy_budget_alert_usd), in
	// (0, 1]; 0 means DefaultAlertAt, 0.8.
	AlertAt float64 `koanf:"alert_at"`
}

// DefaultAlertAt is a budget's alert_at when unset: a fifth of the
// period's budget left is time to act, at a monthly budget days.
const DefaultAlertAt = 0.8

// Alert is the share of the budget at which it alerts.
func (b Budget) Alert() float64 {
	if b.AlertAt == 0 {
		return DefaultAlertAt
	}
	return b.AlertAt
}

// maxBudgetUSD is the largest budget, $1M a period: a typo guard, and
// the bound under which quota's Redis script, which compares amounts as
// Lua doubles, counts every nanodollar exactly (2^53 nanodollars is
// $9.0M).
const maxBudgetUSD = 1e6

// Set reports whether b is a budget at all.
func (b Budget) Set() bool { return b != Budget{} }

// Check reports b's problems to bad, each under key (e.g.
// "callers[0].budget"): usd > 0 and ≤ 1e9 with per day or month when the
// budget is set at all.
func (b Budget) Check(bad func(key, format string, args ...any), key string) {
	if !b.Set() {
		return
	}
	if math.IsNaN(b.USD) || b.USD <= 0 || b.USD > maxBudgetUSD {
		bad(key+".usd", "must be more than 0 and at most %g dollars, got %g", float64(maxBudgetUSD), b.USD)
	}
	if b.Per == "" {
		bad(key+".per", "must be day or month")
	}
	if math.IsNaN(b.AlertAt) || b.AlertAt < 0 || b.AlertAt > 1 {
		bad(key+".alert_at", "must be between 0 (= %g) and 1, got %g", DefaultAlertAt, b.AlertAt)
	}
}

// BudgetPeriod is what a budget counts over: a UTC day or a UTC month.
type BudgetPeriod string

// The periods.
const (
	PerDay   BudgetPeriod = "day"
	PerMonth BudgetPeriod = "month"
)

// UnmarshalText implements encoding.TextUnmarshaler: day or month, or
// empty (unset; Budget.Check asks for it when the budget is set).
func (p *BudgetPeriod) UnmarshalText(b []byte) error {
	return configcheck.SetOptional(p, b, PerDay, PerMonth)
}

// Window returns the period that holds t: its name ("2026-12-01" for a
// day, "2026-12" for a month), which keys the period's spend, and when it
// ends — when the budget resets. t is taken in UTC.
func (p BudgetPeriod) Window(t time.Time) (name string, resets time.Time) {
	t = t.UTC()
	if p == PerDay {
		start := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start.Format("2006-01-02"), start.AddDate(0, 0, 1)
	}
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start.Format("2006-01"), start.AddDate(0, 1, 0)
}

// UnpricedPolicy is what a budget does with a request for a model no
// price matches.
type UnpricedPolicy string

// The policies.
const (
	UnpricedRefuse UnpricedPolicy = "refuse"
	UnpricedAllow  UnpricedPolicy = "allow"
)

// UnmarshalText implements encoding.TextUnmarshaler: refuse or allow, or
// empty (the default, refuse).
func (u *UnpricedPolicy) UnmarshalText(b []byte) error {
	return configcheck.SetOptional(u, b, UnpricedRefuse, UnpricedAllow)
}

// Allows reports whether the policy lets an unpriced request pass; the
// zero value refuses.
func (u UnpricedPolicy) Allows() bool { return u == UnpricedAllow }

// UnpricedAPIPolicy is what a budget does with a request that may cost
// money on an API the proxy cannot price: its answers report no token
// usage the proxy reads.
type UnpricedAPIPolicy string

// The policies.
const (
	UnpricedAPIRefuse    UnpricedAPIPolicy = "refuse"
	UnpricedAPIWorstCase UnpricedAPIPolicy = "worst_case"
)

// UnmarshalText implements encoding.TextUnmarshaler: refuse or
// worst_case, or empty (the default, refuse).
func (u *UnpricedAPIPolicy) UnmarshalText(b []byte) error {
	return configcheck.SetOptional(u, b, UnpricedAPIRefuse, UnpricedAPIWorstCase)
}

// WorstCase reports whether the policy lets such a request pass, settled
// at its worst case; the zero value refuses.
func (u UnpricedAPIPolicy) WorstCase() bool { return u == UnpricedAPIWorstCase }
