package quota

import "github.com/meterproxy/meterproxy/quota/price"

// reservation is what r's budgets reserve for it at p: cost, its worst
// case (price.Price.WorstCase) at its output cap as p bounds it
// (OutputCap), at its input estimate or, when its input is hidden, at the
// model's max_input (InputLimit, or the estimate, if larger); and floor, its
// worst case at the input its body shows, the least a reservation cut to
// what its budgets have left may hold (see the top of this file). floor is cost for a
// request whose input is not hidden.
func reservation(p *price.Price, r Request) (cost, floor price.Nanodollars) {
	output := p.OutputCap(r.OutputTokens, r.Generations)
	floor = p.WorstCase(r.InputTokens, output, r.Tier)
	if !r.HiddenInput {
		return floor, floor
	}
	input := max(r.InputTokens, p.InputLimit(r.Model.Name, r.LongContext))
	return p.WorstCase(input, output, r.Tier), floor
}
