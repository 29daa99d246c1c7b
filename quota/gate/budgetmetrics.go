package gate

import "github.com/prometheus/client_golang/prometheus"

// BudgetCollector exports the spend budgets at scrape time, by budget
// (caller:<name> or class:<class>, from the config: bounded by it), as the
// budget gate last read them — fleet-wide with Redis. The set of budgets
// changes with reloads, so it is an unchecked collector: Describe sends
// nothing.
type BudgetCollector struct {
	g                             *BudgetGate
	limit, spent, reserved, alert *prometheus.Desc
	enqueued                      *prometheus.Desc
	// local is budgets.on_store_error: local's (LocalBudgets).
	localSpent, localReconciled, localMode *prometheus.Desc
}

// NewBudgetCollector returns the collector of g's budget metrics.
func NewBudgetCollector(g *BudgetGate) *BudgetCollector {
	label := []string{"budget"}
	return &BudgetCollector{
		g: g,
		limit: prometheus.NewDesc("meterproxy_budget_limit_usd",
			"A spend budget (callers[].budget, classes.<class>.budget) in US dollars for its current period, by budget.", label, nil),
		spent: prometheus.NewDesc("meterproxy_budget_spent_usd",
			"What a budget's current period has spent in US dollars (priced usage, fleet-wide with Redis), by budget; it starts again at 0 when the period resets.", label, nil),
		reserved: prometheus.NewDesc("meterproxy_budget_reserved_usd",
			"What requests in flight hold reserved of a budget in US dollars (their worst case, until they settle), by budget.", label, nil),
		alert: prometheus.NewDesc("meterproxy_budget_alert_usd",
			"The spend at which a budget's BudgetNearlySpent alert fires: its alert_at share (0.8 unless configured), in US dollars, by budget.", label, nil),
		// A gauge: the providers limit the tokens of batches in progress
		// at once (OpenAI's enqueued token limit), so what is enqueued now
		// is what compares to the limit. Fleet-wide with Redis: every
		// replica reports the same value, so aggregate with max, not sum.
		enqueued: prometheus.NewDesc("meterproxy_batch_enqueued_tokens",
			"Input tokens (estimated) of the batches created through the proxy that it has not yet seen end, fleet-wide with Redis, by account, pool and class.",
			[]string{"account", "pool", "class"}, nil),
		localSpent: prometheus.NewDesc("meterproxy_budget_local_spent_usd_total",
			"What this replica's requests spent on its local share of a budget while the store failed (budgets.on_store_error: local), in US dollars, by budget.", label, nil),
		localReconciled: prometheus.NewDesc("meterproxy_budget_local_reconciled_usd_total",
			"What of meterproxy_budget_local_spent_usd_total has been added to the store's spend since, in US dollars, by budget: the two are equal once reconciled.", label, nil),
		localMode: prometheus.NewDesc("meterproxy_budget_local",
			"1 while this replica answers budgets on its local share, the store failing (budgets.on_store_error: local), else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector; see BudgetCollector.
func (c *BudgetCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *BudgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.g.State() {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, b.Limit, b.Budget)
		ch <- prometheus.MustNewConstMetric(c.spent, prometheus.GaugeValue, b.Spent, b.Budget)
		ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, b.Reserved, b.Budget)
		ch <- prometheus.MustNewConstMetric(c.alert, prometheus.GaugeValue, b.Alert, b.Budget)
	}
	if l, ok := c.g.store.(*LocalBudgets); ok {
		states, active := l.localState()
		byName := map[string]LocalBudgetState{}
		for _, b := range states {
			byName[b.Budget] = b
		}
		for _, b := range c.g.State() { // from 0, each configured budget; one removed by a reload is no more
			ch <- prometheus.MustNewConstMetric(c.localSpent, prometheus.CounterValue, byName[b.Budget].Spent, b.Budget)
			ch <- prometheus.MustNewConstMetric(c.localReconciled, prometheus.CounterValue, byName[b.Budget].Reconciled, b.Budget)
		}
		ch <- prometheus.MustNewConstMetric(c.localMode, prometheus.GaugeValue, map[bool]float64{true: 1}[active])
	}
	for _, e := range c.g.Enqueued() {
		ch <- prometheus.MustNewConstMetric(c.enqueued, prometheus.GaugeValue, float64(e.Tokens), e.Account, e.Pool, e.Class)
	}
}
