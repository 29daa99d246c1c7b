package classify

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBudgetWindow: a day runs from UTC midnight to the next, a month from
// its first to the next month's, whatever t's zone.
func TestBudgetWindow(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	for _, c := range []struct {
		per    BudgetPeriod
		at     time.Time
		name   string
		resets time.Time
	}{
		{PerDay, time.Date(2026, 12, 1, 23, 59, 59, 0, time.UTC), "2026-12-01", time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{PerDay, time.Date(2026, 12, 2, 8, 0, 0, 0, tokyo), "2026-12-01", time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{PerMonth, time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), "2026-12", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{PerMonth, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), "2027-02", time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		name, resets := c.per.Window(c.at)
		if name != c.name || !resets.Equal(c.resets) {
			t.Errorf("%s at %v: %s resets %v, want %s resets %v", c.per, c.at, name, resets, c.name, c.resets)
		}
	}
}

// TestBudgetCheck: every problem of a budget names its key; the zero
// budget has none.
func TestBudgetCheck(t *testing.T) {
	for _, c := range []struct {
		b    Budget
		want []string
	}{
		{Budget{}, nil},
		{Budget{USD: 200, Per: PerMonth}, nil},
		{Budget{USD: 0.5, Per: PerDay, Unpriced: UnpricedAllow}, nil},
		{Budget{USD: 0.5, Per: PerDay, UnpricedAPIs: UnpricedAPIWorstCase}, nil},
		{Budget{UnpricedAPIs: UnpricedAPIWorstCase}, []string{"b.usd", "b.per"}},
		{Budget{USD: 200}, []string{"b.per"}},
		{Budget{USD: -1, Per: PerDay}, []string{"b.usd"}},
		{Budget{Per: PerDay}, []string{"b.usd"}},
		{Budget{USD: 2e6, Per: PerDay}, []string{"b.usd"}},
		{Budget{USD: 1, Per: PerDay, AlertAt: 1.5}, []string{"b.alert_at"}},
	} {
		var got []string
		c.b.Check(func(key, format string, args ...any) { got = append(got, key+": "+fmt.Sprintf(format, args...)) }, "b")
		if len(got) != len(c.want) {
			t.Errorf("%+v: %q, want problems at %q", c.b, got, c.want)
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(got[i], w+": ") {
				t.Errorf("%+v: %q, want it at %s", c.b, got[i], w)
			}
		}
	}
}
