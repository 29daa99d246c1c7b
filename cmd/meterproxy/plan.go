package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meterproxy/meterproxy/proxy"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What bounds the fleet's requests in flight (planResult.BoundBy).
const (
	boundRequests    = "requests"
	boundTokens      = "tokens"
	boundMaxInFlight = "max_in_flight"
)

// planInput is what plan needs besides the config.
type planInput struct {
	// ServiceTime is L, the mean time one request spends upstream.
	ServiceTime time.Duration
	// Source names where ServiceTime came from ("--latency" or the --from
	// measurement), for errors and the table.
	Source string
	// Replicas is how many worker processes share the fleet bound.
	Replicas int64
	// TokensPerRequest is the mean tokens of one request, input + output;
	// 0 means not given.
	TokensPerRequest int64
}

// planResult is the plan: the numbers to configure, and why. The JSON
// names are the --json output.
type planResult struct {
	FleetInFlight        int64    `json:"fleet_in_flight"`
	BoundBy              string   `json:"bound_by"`
	PerProcessInFlight   int64    `json:"per_process_in_flight"`
	TransportConnections int      `json:"transport_connections"`
	MaxReplicas          int64    `json:"max_replicas"`
	LargestChunk         int64    `json:"largest_chunk"`
	ServiceTimeSeconds   float64  `json:"service_time_seconds"`
	Replicas             int64    `json:"replicas"`
	RequestsPerSecond    float64  `json:"requests_per_second"`
	Notes                []string `json:"notes"`
	// Why is the arithmetic behind FleetInFlight, for the table.
	Why string `json:"-"`
}

// plan works out the in-flight bounds, connections, replica ceiling and
// batch size that cfg's account allows at in.ServiceTime per request. It is
// pure: Little's law (in flight = rate × service time) and rounding.
func plan(cfg Config, in planInput) (planResult, error) {
	a := cfg.Account
	switch {
	case in.ServiceTime <= 0:
		return planResult{}, fmt.Errorf("plan: %s: the service time must be > 0 (a Go duration such as 800ms), got %s", in.Source, in.ServiceTime)
	case in.Replicas <= 0:
		return planResult{}, fmt.Errorf("plan: --replicas must be > 0, got %d", in.Replicas)
	case in.TokensPerRequest < 0:
		return planResult{}, fmt.Errorf("plan: --tokens-per-request must be >= 0 (0 = not given), got %d", in.TokensPerRequest)
	case a.RequestsPerMinute <= 0:
		return planResult{}, fmt.Errorf("plan: account.requests_per_minute must be > 0, got %d", a.RequestsPerMinute)
	}
	lat := fmtDuration(in.ServiceTime)
	minutesPerL := 60 * float64(time.Second) / float64(in.ServiceTime) // 60 / L: a per-minute rate ÷ this = in flight
	r := planResult{
		ServiceTimeSeconds: in.ServiceTime.Seconds(),
		Replicas:           in.Replicas,
		RequestsPerSecond:  float64(a.RequestsPerMinute) / 60,
		Notes:              []string{},
		BoundBy:            boundRequests,
	}
	byRequests := floorCount(float64(a.RequestsPerMinute) / minutesPerL)
	r.FleetInFlight, r.Why = byRequests, fmt.Sprintf("%.2f requests/s × %s", r.RequestsPerSecond, lat)
	boundRate := r.RequestsPerSecond // requests/s the binding allowance serves
	note := func(format string, args ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, args...)) }

	switch t := in.TokensPerRequest; {
	case a.TokensPerMinute > 0 && t > 0:
		tokenRate := float64(a.TokensPerMinute) / 60 / float64(t)
		byTokens := floorCount(float64(a.TokensPerMinute) / float64(t) / minutesPerL)
		if byTokens < byRequests {
			r.FleetInFlight, r.BoundBy, boundRate = byTokens, boundTokens, tokenRate
			r.Why = fmt.Sprintf("%.1f tokens/s ÷ %d tokens/request = %.2f requests/s × %s", float64(a.TokensPerMinute)/60, t, tokenRate, lat)
			note("tokens bind: at %d tokens/request the account serves %.2f requests/s, fewer than its %.2f by requests (which alone would allow %d in flight)",
				t, tokenRate, r.RequestsPerSecond, byRequests)
		} else {
			note("tokens do not bind: at %d tokens/request the token allowance would allow %d in flight", t, byTokens)
		}
	case a.TokensPerMinute > 0:
		note("account.tokens_per_minute is %d but --tokens-per-request is not given: planned by requests only; pass the mean tokens per request (input + output) to include the token bound",
			a.TokensPerMinute)
	case in.TokensPerRequest > 0:
		note("--tokens-per-request %d ignored: account.tokens_per_minute is 0 (tokens are not enforced)", in.TokensPerRequest)
	}

	if r.FleetInFlight == 0 {
		check := in.Source
		if r.BoundBy == boundTokens {
			check = "--tokens-per-request and " + check
		}
		return planResult{}, fmt.Errorf("plan: the fleet in-flight bound is 0: at %s per request the account's rate keeps fewer than one request in flight on average "+
			"(%s), so there is no in-flight bound to plan — a single worker sending one request at a time would already exceed the allowance, "+
			"and the rate alone limits it; check %s (the mean service time per request, such as 800ms)", lat, r.Why, check)
	}
	if a.MaxInFlight > 0 && a.MaxInFlight < r.FleetInFlight {
		rate := "request rate"
		if r.BoundBy == boundTokens {
			rate = "token rate"
		}
		note("account.max_in_flight (%d) is tighter than the %d the account's %s allows: at %s per request the fleet completes at most %.2f requests/s of the %.2f the account serves; raise account.max_in_flight to %d to use the whole allowance",
			a.MaxInFlight, r.FleetInFlight, rate, lat, float64(a.MaxInFlight)/in.ServiceTime.Seconds(), boundRate, r.FleetInFlight)
		r.Why = fmt.Sprintf("tighter than the %d the account's %s allows", r.FleetInFlight, rate)
		r.FleetInFlight, r.BoundBy = a.MaxInFlight, boundMaxInFlight
	}

	r.PerProcessInFlight = ceilDiv(r.FleetInFlight, in.Replicas)
	r.MaxReplicas = ceilDiv(r.FleetInFlight, r.PerProcessInFlight)
	if r.MaxReplicas < in.Replicas {
		note("%d replicas × %d in flight ask for %d slots of %d: above %d replicas a worker cannot obtain capacity",
			in.Replicas, r.PerProcessInFlight, in.Replicas*r.PerProcessInFlight, r.FleetInFlight, r.MaxReplicas)
	}

	r.TransportConnections = proxy.ConnectionLimit(cfg.Upstream, r.PerProcessInFlight)
	if int64(r.TransportConnections) < r.PerProcessInFlight {
		derived := cfg.Upstream
		derived.MaxConnections = 0
		r.TransportConnections = proxy.ConnectionLimit(derived, r.PerProcessInFlight)
		note("upstream.max_connections (%d) is below the per-process bound %d, so the pool would be a second, accidental gate: raise it to at least %d, or set 0 to derive %d",
			cfg.Upstream.MaxConnections, r.PerProcessInFlight, r.PerProcessInFlight, r.TransportConnections)
	}

	grace := cfg.Server.ShutdownGrace
	r.LargestChunk = floorCount(float64(grace) / float64(in.ServiceTime) * float64(r.PerProcessInFlight))
	if r.LargestChunk == 0 {
		note("server.shutdown_grace (%s) is too short for even one request of %s to finish during a drain: make chunks idempotent, or raise it", grace, lat)
	}
	return r, nil
}

// floorCount is floor(x) as a count, robust to float noise such as
// 266.99999999 for 267 and saturating instead of overflowing.
func floorCount(x float64) int64 {
	const most = 1 << 53
	if x >= most {
		return most
	}
	return int64(math.Floor(x + 1e-9))
}

// ceilDiv is ceil(a / b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// fmtDuration shows a service time to the millisecond (microsecond below 10ms).
func fmtDuration(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
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
// a running proxy's /metrics, plans, and prints a table or JSON.
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
		st, n, err := scrapeServiceTime(ctx, f.from)
		if err != nil {
			return err
		}
		in.ServiceTime, in.Source = st, fmt.Sprintf("--from %s (mean of %d requests)", f.from, n)
	case !set["latency"]:
		return errors.New("plan: --latency is required (the mean upstream service time, such as 800ms), or --from URL to measure it on a running meterproxy")
	}
	r, err := plan(cfg, in)
	if err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return printPlan(stdout, cfg, in, r)
}

// printPlan writes the plan as an aligned table, one line of meaning per
// number, then the notes.
func printPlan(w io.Writer, cfg Config, in planInput, r planResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format+"\n", args...) }
	lat := fmtDuration(in.ServiceTime)
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

// upstreamHistogram is the metric whose sum / count is the mean service time.
const upstreamHistogram = "meterproxy_upstream_duration_seconds"

// scrapeServiceTime reads base's /metrics and returns the mean upstream
// service time over every class, and how many requests it averages.
func scrapeServiceTime(ctx context.Context, base string) (time.Duration, uint64, error) {
	u := strings.TrimSuffix(base, "/")
	if !strings.HasSuffix(u, "/metrics") {
		u += "/metrics"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("plan: --from: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("plan: --from: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("plan: --from: GET %s: %s", u, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, 0, fmt.Errorf("plan: --from %s: %w", u, err)
	}
	mf := families[upstreamHistogram]
	if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM {
		return 0, 0, fmt.Errorf("plan: --from %s: no histogram %s (is it the admin address of a meterproxy that has forwarded a request?)", u, upstreamHistogram)
	}
	var sum float64
	var count uint64
	for _, m := range mf.GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
		count += m.GetHistogram().GetSampleCount()
	}
	if count == 0 {
		return 0, 0, fmt.Errorf("plan: --from %s: %s has no observations (count 0): no request has been forwarded yet; send traffic through that proxy first, or give --latency", u, upstreamHistogram)
	}
	return time.Duration(math.Round(sum / float64(count) * float64(time.Second))), count, nil
}
