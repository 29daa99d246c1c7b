package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/meterproxy/meterproxy/proxy/capacity"
)

// The plan's bounds, as capacity names them.
const (
	boundRequests    = capacity.BoundRequests
	boundTokens      = capacity.BoundTokens
	boundMaxInFlight = capacity.BoundMaxInFlight
)

// planInput and planResult are capacity's.
type (
	planInput  = capacity.Input
	planResult = capacity.Result
)

// plan is capacity.Plan for cfg's account, upstream and drain.
func plan(cfg Config, in planInput) (planResult, error) {
	in.Account, in.Upstream, in.ShutdownGrace = cfg.Account, cfg.Upstream, cfg.Server.ShutdownGrace
	return capacity.Plan(in)
}

// poolsPlan is the plan of the account and, under Pools, each
// account.models pool's, planned as an account of its own. A pool whose
// bound works out to 0 (capacity.ErrZeroBound) has no plan: it is under
// Unplanned, with why, and the rest are planned.
type poolsPlan struct {
	planResult
	Pools     map[string]planResult `json:"pools,omitempty"`
	Unplanned map[string]string     `json:"unplanned_pools,omitempty"`
}

// planPools plans the account and every pool.
func planPools(cfg Config, in planInput) (poolsPlan, error) {
	r, err := plan(cfg, in)
	if err != nil {
		return poolsPlan{}, err
	}
	out := poolsPlan{planResult: r}
	for _, m := range cfg.Account.Models {
		pc := cfg
		pc.Account = cfg.quota().Pool(m.Name).Account
		pr, err := plan(pc, in)
		if errors.Is(err, capacity.ErrZeroBound) {
			if out.Unplanned == nil {
				out.Unplanned = map[string]string{}
			}
			out.Unplanned[m.Name] = err.Error()
			continue
		}
		if err != nil {
			return poolsPlan{}, fmt.Errorf("pool %s: %w", m.Name, err)
		}
		if out.Pools == nil {
			out.Pools = map[string]planResult{}
		}
		out.Pools[m.Name] = pr
	}
	return out, nil
}

// planFlags are the plan command's own flags. run registers them only for
// plan, so the other commands' usage does not change.
type planFlags struct {
	fs       *flag.FlagSet
	latency  time.Duration
	from     string
	replicas int64
	tokens   int64
	json     bool
}

// planFlagsFor registers plan's flags on fs when cmd is plan; otherwise it
// returns nil.
func planFlagsFor(cmd string, fs *flag.FlagSet) *planFlags {
	if cmd != "plan" {
		return nil
	}
	f := &planFlags{fs: fs}
	fs.DurationVar(&f.latency, "latency", 0, "mean upstream service time per request, e.g. 800ms")
	fs.StringVar(&f.from, "from", "", "admin `URL` of a running meterproxy (http://host:9090): measure the service time from its /metrics")
	fs.Int64Var(&f.replicas, "replicas", 0, "worker processes sharing the fleet bound (default account.expected_replicas)")
	fs.Int64Var(&f.tokens, "tokens-per-request", 0, "mean tokens per request, input + output (for account.tokens_per_minute)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the table")
	return f
}

// runPlan is the plan command: it takes the service time from --latency or
// a running proxy's /metrics, plans, and prints a table or JSON; with
// upstream.accounts, for each account and their total (runPlanAccounts).
func runPlan(ctx context.Context, cfg Config, f *planFlags, stdout io.Writer) error {
	if f.fs.NArg() > 0 {
		return fmt.Errorf("plan: unexpected argument %q", f.fs.Arg(0))
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	in := planInput{ServiceTime: f.latency, Source: "--latency", Replicas: cfg.Account.ExpectedReplicas, TokensPerRequest: f.tokens}
	if set["replicas"] {
		in.Replicas = f.replicas
	}
	switch {
	case set["from"] && set["latency"]:
		return errors.New("plan: give --latency or --from, not both")
	case set["from"]:
		st, n, err := capacity.ScrapeServiceTime(ctx, f.from)
		if err != nil {
			return err
		}
		in.ServiceTime, in.Source = st, fmt.Sprintf("--from %s (mean of %d requests)", f.from, n)
	case !set["latency"]:
		return errors.New("plan: --latency is required (the mean upstream service time, such as 800ms), or --from URL to measure it on a running meterproxy")
	}
	if len(cfg.Upstream.Accounts) > 0 {
		return runPlanAccounts(cfg, in, set["replicas"], f.json, stdout)
	}
	r, err := planPools(cfg, in)
	if err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if err := printPlan(stdout, cfg, in, r.planResult); err != nil {
		return err
	}
	for _, m := range cfg.Account.Models {
		pc := cfg
		pc.Account = cfg.quota().Pool(m.Name).Account
		if why, ok := r.Unplanned[m.Name]; ok {
			if _, err := fmt.Fprintf(stdout, "\npool %s (account.models[].name): not planned: %s\n", m.Name, why); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintf(stdout, "\npool %s (account.models[].name; its numbers below are the pool's, as account.* are the account's)\n", m.Name); err != nil {
			return err
		}
		if err := printPlan(stdout, pc, in, r.Pools[m.Name]); err != nil {
			return err
		}
	}
	return nil
}

// printPlan writes the plan as an aligned table, one line of meaning per
// number, then the notes.
func printPlan(w io.Writer, cfg Config, in planInput, r planResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format+"\n", args...) }
	lat := capacity.FmtDuration(in.ServiceTime)
	p("service time\t%s\tmean per request, from %s", lat, in.Source)
	p("account requests/s\t%.2f\taccount.requests_per_minute %d / 60", r.RequestsPerSecond, cfg.Account.RequestsPerMinute)
	p("replicas\t%d\tworker processes sharing the fleet (--replicas; account.expected_replicas is %d)", r.Replicas, cfg.Account.ExpectedReplicas)
	if r.BoundBy == boundMaxInFlight {
		p("fleet in flight\t%d\taccount.max_in_flight as configured: %s (see note)", r.FleetInFlight, r.Why)
	} else {
		p("fleet in flight\t%d\tset account.max_in_flight to this (now %d); bound by %s: %s", r.FleetInFlight, cfg.Account.MaxInFlight, r.BoundBy, r.Why)
	}
	p("per-process in flight\t%d\tthe worker's concurrency: ceil(%d / %d replicas)", r.PerProcessInFlight, r.FleetInFlight, r.Replicas)
	conns := "0 derives this"
	if m := cfg.Upstream.MaxConnections; m > 0 {
		conns = fmt.Sprintf("now %d", m)
	}
	p("transport connections\t%d\tupstream.max_connections: at least %d, the per-process bound (%s)", r.TransportConnections, r.PerProcessInFlight, conns)
	p("max replicas\t%d\tthe HPA's maxReplicas: ceil(%d / %d); above it a worker cannot obtain capacity", r.MaxReplicas, r.FleetInFlight, r.PerProcessInFlight)
	p("largest chunk\t%d\tthe batch size, in requests: finishes inside server.shutdown_grace (%s / %s × %d)", r.LargestChunk, cfg.Server.ShutdownGrace, lat, r.PerProcessInFlight)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintln(w, "note:", n); err != nil {
			return err
		}
	}
	return nil
}
