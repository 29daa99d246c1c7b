package price

import (
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/quota/glob"
)

// issuePrices are issue 25's two entries, and a narrower gpt-4o-mini
// entry listed first, as it must be.
func issuePrices() []Price {
	return []Price{
		{Match: []string{"gpt-4o-mini*"}, Input: 0.15, CachedInput: 0.075, Output: 0.60},
		{Match: []string{"gpt-4o", "gpt-4o-2024-*"}, Input: 2.50, CachedInput: 1.25, Output: 10.00,
			Flex: &TierPrice{Input: 1.25, CachedInput: 0.625, Output: 5.00}},
		{Match: []string{"claude-sonnet-4*"}, Input: 3.00, CacheWrite: 3.75, CacheRead: 0.30, Output: 15.00},
	}
}

// TestPriceFor: Table.For: the first entry that matches wins; a deployment matches
// regardless of case, a model field exactly; no model, an over-long one
// or one nothing matches has no price.
func TestPriceFor(t *testing.T) {
	prices := Table(issuePrices())
	type Model struct { // quota.Model's fields
		Name       string
		Deployment bool
	}
	tests := []struct {
		model Model
		want  int // the entry; -1: none
	}{
		{Model{Name: "gpt-4o-mini"}, 0},
		{Model{Name: "gpt-4o-mini-2024-07-18"}, 0},
		{Model{Name: "gpt-4o"}, 1},
		{Model{Name: "gpt-4o-2024-08-06"}, 1},
		{Model{Name: "gpt-4o-audio-preview"}, -1}, // "gpt-4o" matches only itself
		{Model{Name: "claude-sonnet-4-5"}, 2},
		{Model{Name: "claude-opus-4"}, -1},
		{Model{Name: "GPT-4O"}, -1}, // a model field matches exactly
		{Model{Name: "GPT-4O", Deployment: true}, 1},
		{Model{Name: "Gpt-4o-Mini-EU", Deployment: true}, 0},
		{Model{Name: ""}, -1},
		{Model{Name: "gpt-4o-mini" + strings.Repeat("x", glob.MaxName)}, -1}, // longer than any pattern is matched against
	}
	for _, tt := range tests {
		got := prices.For(tt.model.Name, tt.model.Deployment)
		switch {
		case tt.want < 0 && got != nil:
			t.Errorf("For(%+v) = %v, want none", tt.model, got.Match)
		case tt.want >= 0 && (got == nil || got.Match[0] != prices[tt.want].Match[0]):
			t.Errorf("For(%+v) = %v, want prices[%d] %v", tt.model, got, tt.want, prices[tt.want].Match)
		}
	}
	prices = append(prices, Price{Match: []string{"*"}})
	if prices.For("claude-opus-4", false) == nil {
		t.Error(`a "*" entry does not price a model no other entry matches`)
	}
}
