package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/store"
)

// checkConfig prints the numbers a valid configuration works out to: the
// account's, then each account.models pool's, in one table whose columns
// are the fleet's numbers and one replica's (with upstream.accounts, a
// section of them per account: printAccounts); then the prices, and a
// warning for each part of the traffic no price covers (pricesSection);
// then the budgets (budgetsSection).
// Blank lines keep their cells (gap), or tabwriter would start a table of
// its own after each.
func checkConfig(cfg Config, w io.Writer) error {
	q := cfg.quota()
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format+"\n", args...) }
	const gap = "\t\t"
	var inFlight int64
	if len(q.Accounts) > 0 {
		inFlight = printAccounts(p, q, cfg.Upstream)
	} else {
		p("pool default (the account)\tfleet\tper replica (÷ %d expected replicas: %s)", cfg.Account.ExpectedReplicas, perReplicaMeaning(q))
		printPool(p, q)
		inFlight = q.Enforced().InFlight
		for i, m := range cfg.Account.Models {
			pq := q.Pool(m.Name)
			p(gap)
			p("pool %s (account.models[%d])\tfleet\tper replica", m.Name, i)
			printPool(p, pq)
			inFlight += pq.Enforced().InFlight
		}
	}
	// With a shared store one replica may hold the whole fleet bound of
	// every pool, of every account: one transport carries them all.
	p(gap)
	p("transport connection limit (per host)\t-\t%d", proxy.ConnectionLimit(cfg.Upstream, inFlight))
	p("store\t%s\t%s", storeName(q), storeName(q))
	if err := tw.Flush(); err != nil {
		return err
	}
	out := "config is valid\n\n"
	for line := range strings.Lines(table.String()) {
		out += strings.TrimRight(line, " \n") + "\n"
	}
	for _, w := range replicasWarnings(cfg) {
		out += "warning: " + w + "\n"
	}
	_, err := io.WriteString(w, out+"\n"+pricesSection(q)+"\n"+budgetsSection(cfg))
	return err
}

// printPool prints the numbers one pool's configuration works out to.
func printPool(p func(string, ...any), q quota.Config) {
	fleet, local := q.Limits(), q.PerReplica()
	if !q.Account.RequestLimited() { // quota decides: only the adaptive bound binds
		p("requests/s\tnone (the adaptive bound only)\t")
		printInFlight(p, q, fleet, local)
		return
	}
	p("requests/s\t%.2f\t%.2f", rps(fleet.AccountRPM), rps(local.AccountRPM))
	p("interactive requests/s (any free capacity)\t%.2f\t%.2f", rps(fleet.AccountRPM), rps(local.AccountRPM))
	p("bulk requests/s (own share)\t%.2f\t%.2f", rps(fleet.BulkRPM), rps(local.BulkRPM))
	if fleet.Borrow {
		p("bulk requests/s (borrowing, at most)\t%.2f\t%.2f", rps(fleet.AccountRPM-fleet.ReserveRPM), rps(local.AccountRPM-local.ReserveRPM))
	}
	p("interactive reserve requests/s\t%.2f\t%.2f", rps(fleet.ReserveRPM), rps(local.ReserveRPM))
	if fleet.AccountTPM > 0 {
		p("tokens/s\t%.1f\t%.1f", rps(fleet.AccountTPM), rps(local.AccountTPM))
		p("bulk tokens/s (own share / borrowing, at most)\t%.1f / %.1f\t%.1f / %.1f", rps(fleet.BulkTPM), rps(fleet.AccountTPM-fleet.ReserveTPM),
			rps(local.BulkTPM), rps(local.AccountTPM-local.ReserveTPM))
		p("interactive reserve tokens/s\t%.1f\t%.1f", rps(fleet.ReserveTPM), rps(local.ReserveTPM))
	}
	if fleet.OutputTPM > 0 {
		p("output tokens/s (bulk held below %.1f left)\t%.1f\t%.1f", float64(fleet.ReserveOutputTPM), rps(fleet.OutputTPM), rps(local.OutputTPM))
	}
	printInFlight(p, q, fleet, local)
}

// printInFlight prints a pool's in-flight bound and bulk's part of it;
// with adaptive_in_flight the bound is the ceiling it moves under.
func printInFlight(p func(string, ...any), q quota.Config, fleet, local store.Limits) {
	label := "in-flight bound"
	if q.Account.AdaptiveInFlight {
		label = "in-flight bound (adaptive: its ceiling)"
	}
	p("%s\t%d\t%d", label, fleet.InFlight, local.InFlight)
	p("bulk in flight (own share / with borrowing)\t%d / %d\t%d / %d",
		fleet.BulkInFlight, fleet.InFlight-fleet.ReserveInFlight, local.BulkInFlight, local.InFlight-local.ReserveInFlight)
}

func rps(rpm int64) float64 { return float64(rpm) / 60 }

func storeName(q quota.Config) string {
	if q.Store.Shared() {
		return "redis (on_error: " + string(q.Store.OnError) + ")"
	}
	return "in-process"
}

func perReplicaMeaning(q quota.Config) string {
	if q.Store.Shared() {
		return "the fallback when Redis fails"
	}
	return "what this replica enforces"
}
