package gate

import (
	"context"

	"github.com/meterproxy/meterproxy/quota/price"
)

// A request whose input is hidden (quota.Request.HiddenInput) reserves its
// worst case at its model's max_input: often more than a small budget has
// left. Refused for it, such requests could never spend a budget's last
// dollars; reserved at what their bodies show, ten at once spent twelve
// times a budget (issue 31). So such a reservation is cut to what its
// budgets have unspent — the least of them — but never below its floor,
// the worst case at the input its body shows. A reservation of all that
// is unspent fits only while nothing else is reserved there: it waits for
// the requests in flight to settle, then runs alone, every other request
// waiting for it in turn. What the budget spends then passes its limit by
// at most what that one request costs beyond its reservation.

// budgetCut is a reservation as BudgetGate.Start asks for it: cost, from
// full (the request's worst case) down to floor.
type budgetCut struct {
	full, floor, cost price.Nanodollars
}

// newBudgetCut is r's reservation, uncut. A Floor of 0 or above Cost
// means it is never cut.
func newBudgetCut(r Request) budgetCut {
	floor := r.Floor
	if floor <= 0 || floor > r.Cost {
		floor = r.Cost
	}
	return budgetCut{full: r.Cost, floor: floor, cost: r.Cost}
}

// reserve asks store to reserve c's cost on keys under id; while the
// answer is not a reservation and lets cut lower the cost, it asks again
// at once with the lower one. It returns the last answer.
func (c *budgetCut) reserve(ctx context.Context, store BudgetStore, keys []budgetKey, id string) (budgetAnswer, error) {
	for {
		ans, err := store.reserve(ctx, keys, id, c.cost)
		if err != nil || ans.Outcome == budgetReserved || !c.cut(keys, ans.Use) {
			return ans, err
		}
	}
}

// cut lowers c's cost to what keys have unspent at uses (a store's
// answer), the least of them, but not below floor; it reports whether the
// cost went down. Each cut lowers it, so a run of them ends.
func (c *budgetCut) cut(keys []budgetKey, uses []budgetUse) bool {
	if c.cost <= c.floor || len(uses) != len(keys) {
		return false
	}
	next := c.full
	for i, k := range keys {
		next = min(next, unspent(k.Limit, uses[i].Spent))
	}
	if next = max(next, c.floor); next >= c.cost {
		return false
	}
	c.cost = next
	return true
}

// reset asks for the whole worst case again, after a wait.
func (c *budgetCut) reset() { c.cost = c.full }

// unspent is what a budget of limit has not spent; 0 when it spent it
// all.
func unspent(limit, spent price.Nanodollars) price.Nanodollars {
	if spent < limit {
		return limit - spent
	}
	return 0
}
