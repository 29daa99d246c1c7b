// Package price says what a request costs in dollars: money as
// Nanodollars, the prices list (config key prices) as a Table whose For
// finds a model's Price, whose Cost prices a response's Usage at the tier
// it names and whose WorstCase bounds what a request could cost; what the
// proxy metered of a batch (BatchFile) and what it could cost
// (Price.BatchWorst). It is pure: no clock, no store, no I/O; quota's
// budgets reserve and settle in its money.
package price
