package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/meterproxy/meterproxy/proxy"
)

// accountsPlan is the plan of several provider accounts (upstream.accounts):
// each account planned on its own limits, its pools with it, and what the
// fleet holds of all of them together — one fleet and one transport serve
// every account, so their bounds add up.
type accountsPlan struct {
	Accounts []accountPlan `json:"accounts"`
	Total    planTotal     `json:"total"`
}

// accountPlan is one account's plan: its own pool's and its models'.
type accountPlan struct {
	Name string `json:"name"`
	poolsPlan
}

// planTotal is what every account's plan adds up to.
type planTotal struct {
	// FleetInFlight is every account's fleet bound, every pool's, together.
	FleetInFlight int64 `json:"fleet_in_flight"`
	// PerProcessInFlight is every account's per-process bound together: a
	// worker's concurrency when it sends to all of them.
	PerProcessInFlight int64 `json:"per_process_in_flight"`
	// TransportConnections is what the one transport needs for them.
	TransportConnections int `json:"transport_connections"`
	// MaxReplicas is ceil(FleetInFlight ÷ PerProcessInFlight): the
	// autoscaler's ceiling, as the chart derives it.
	MaxReplicas int64 `json:"max_replicas"`
}

// accountConfigs are cfg as each of upstream.accounts is planned: the
// account's own section in place of the top-level one (its
// expected_replicas the top level's when unset), in the file's order.
func accountConfigs(cfg Config) []Config {
	q := cfg.quota()
	out := make([]Config, len(cfg.Upstream.Accounts))
	for i, a := range cfg.Upstream.Accounts {
		ac := cfg
		ac.Account = q.ForAccount(a.Name).Account
		ac.Upstream.Accounts = nil
		out[i] = ac
	}
	return out
}

// planAccounts plans every account; with replicasSet (--replicas) every
// account is planned for in.Replicas, otherwise each for its own
// expected_replicas.
func planAccounts(cfg Config, in planInput, replicasSet bool) (accountsPlan, error) {
	var out accountsPlan
	for i, ac := range accountConfigs(cfg) {
		name := cfg.Upstream.Accounts[i].Name
		ain := in
		if !replicasSet {
			ain.Replicas = ac.Account.ExpectedReplicas
		}
		r, err := planPools(ac, ain)
		if err != nil {
			return accountsPlan{}, fmt.Errorf("account %s (upstream.accounts[%d]): %w", name, i, err)
		}
		out.Accounts = append(out.Accounts, accountPlan{Name: name, poolsPlan: r})
		for _, pr := range append([]planResult{r.planResult}, poolResults(ac, r)...) {
			out.Total.FleetInFlight += pr.FleetInFlight
			out.Total.PerProcessInFlight += pr.PerProcessInFlight
		}
	}
	out.Total.TransportConnections = proxy.ConnectionLimit(cfg.Upstream, out.Total.PerProcessInFlight)
	out.Total.MaxReplicas = ceilDiv(out.Total.FleetInFlight, out.Total.PerProcessInFlight)
	return out, nil
}

// poolResults are r's pools' plans in ac's account.models order.
func poolResults(ac Config, r poolsPlan) []planResult {
	out := make([]planResult, 0, len(ac.Account.Models))
	for _, m := range ac.Account.Models {
		out = append(out, r.Pools[m.Name])
	}
	return out
}

// ceilDiv is ceil(a ÷ b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// runPlanAccounts prints the plan of several accounts: one JSON object, or
// each account's table (its pools' after it) and then the total.
func runPlanAccounts(cfg Config, in planInput, replicasSet, asJSON bool, stdout io.Writer) error {
	r, err := planAccounts(cfg, in, replicasSet)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	for i, ac := range accountConfigs(cfg) {
		ap := r.Accounts[i]
		ain := in
		ain.Replicas = ap.Replicas
		sep := "\n"
		if i == 0 {
			sep = ""
		}
		if _, err := fmt.Fprintf(stdout, "%saccount %s (upstream.accounts[%d]; its numbers below are its own: account.* is its upstream.accounts[%d].account)\n",
			sep, ap.Name, i, i); err != nil {
			return err
		}
		if err := printPlan(stdout, ac, ain, ap.planResult); err != nil {
			return err
		}
		for _, m := range ac.Account.Models {
			if why, ok := ap.Unplanned[m.Name]; ok {
				if _, err := fmt.Fprintf(stdout, "\npool %s/%s (its account.models[].name): not planned: %s\n", ap.Name, m.Name, why); err != nil {
					return err
				}
				continue
			}
			if _, err := fmt.Fprintf(stdout, "\npool %s/%s (its account.models[].name; its numbers below are the pool's, as account.* are the account's)\n", ap.Name, m.Name); err != nil {
				return err
			}
			pc := ac
			pc.Account = ac.quota().Pool(m.Name).Account
			if err := printPlan(stdout, pc, ain, ap.Pools[m.Name]); err != nil {
				return err
			}
		}
	}
	return printPlanTotal(stdout, r.Total)
}

// printPlanTotal prints what every account's plan adds up to.
func printPlanTotal(w io.Writer, t planTotal) error {
	if _, err := fmt.Fprintf(w, "\nall accounts (one fleet, one transport)\n"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format+"\n", args...) }
	p("fleet in flight\t%d\tevery account's, every pool's, together: what the fleet holds upstream at once", t.FleetInFlight)
	p("per-process in flight\t%d\tevery account's per-process bound together: the worker's concurrency", t.PerProcessInFlight)
	p("transport connections\t%d\tupstream.max_connections: at least %d (one transport carries every account)", t.TransportConnections, t.PerProcessInFlight)
	p("max replicas\t%d\tthe HPA's maxReplicas: ceil(%d / %d), as the chart derives it", t.MaxReplicas, t.FleetInFlight, t.PerProcessInFlight)
	return tw.Flush()
}
