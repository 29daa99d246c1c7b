package gate

import (
	"slices"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

// all returns every configured budget, by name.
func (s *budgetSet) all() []NamedBudget {
	var bs []NamedBudget
	for name, b := range s.callers {
		bs = append(bs, NamedBudget{"caller:" + name, b})
	}
	for _, c := range classify.Classes {
		if s.classes[c].Set() {
			bs = append(bs, NamedBudget{"class:" + c.String(), s.classes[c]})
		}
	}
	slices.SortFunc(bs, func(a, b NamedBudget) int { return strings.Compare(a.Name, b.Name) })
	return bs
}

// budgetSet is the configured budgets, by caller name and by class.
type budgetSet struct {
	callers map[string]classify.Budget
	classes [classify.NumClasses]classify.Budget
	// maxQueue is each class's max_queue: the most of its requests that
	// may wait at budgets on this replica at once.
	maxQueue [classify.NumClasses]int
}

// NamedBudget is a budget with the name the store and metrics know it by.
type NamedBudget struct {
	Name string
	classify.Budget
}

// of returns the budgets a request of caller and class draws on: its
// caller's, then its class's.
func (s *budgetSet) of(caller string, class classify.Class) []NamedBudget {
	var bs []NamedBudget
	if b, ok := s.callers[caller]; ok && b.Set() {
		bs = append(bs, NamedBudget{"caller:" + caller, b})
	}
	if class.Valid() && s.classes[class].Set() {
		bs = append(bs, NamedBudget{"class:" + class.String(), s.classes[class]})
	}
	return bs
}

// periods are budgets bs's periods at now, as the store keys them.
func periods(bs []NamedBudget, now time.Time) []budgetKey {
	keys := make([]budgetKey, len(bs))
	for i, b := range bs {
		period, resets := b.Per.Window(now)
		keys[i] = budgetKey{Budget: b.Name, Period: period, Limit: price.FromDollars(b.USD), Resets: resets}
	}
	return keys
}

// Unpriced is the refusal of a request for model, which no price matches,
// by the first of budgets bs that refuses unpriced models; nil when every
// one lets it pass at $0.
func Unpriced(bs []NamedBudget, model string) error {
	for _, b := range bs {
		if !b.Unpriced.Allows() {
			return &UnpricedModelError{Budget: b.Name, Model: model}
		}
	}
	return nil
}
