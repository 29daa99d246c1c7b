// Package capacity works out the numbers a fleet needs from an account's
// allowance and a service time, by Little's law (requests in flight =
// throughput × service time): the fleet's in-flight bound, each worker's,
// the transport's connections, the autoscaler's ceiling and the largest
// chunk of work a drain lets finish. meterproxy plan prints them.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What bounds the fleet's requests in flight (Result.BoundBy).
const (
	BoundRequests    = "requests"
	BoundTokens      = "tokens"
	BoundMaxInFlight = "max_in_flight"
)

// Input is what Plan works from: the account, the transport and drain
// settings, and the measured or assumed service time.
type Input struct {
	// Account is the account section (requests and tokens per minute,
	// max_in_flight).
	Account quota.AccountConfig
	// Upstream is the upstream section (max_connections).
	Upstream proxy.UpstreamConfig
	// ShutdownGrace is server.shutdown_grace.
	ShutdownGrace time.Duration
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

// Result is the plan: the numbers to configure, and why. The JSON names
// are meterproxy plan's --json output.
type Result struct {
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

// ErrZeroBound is Plan's error when the account's rate keeps fewer than one
// request in flight at the service time: there is no bound to plan.
var ErrZeroBound = errors.New("the fleet in-flight bound is 0")

// Plan works out the in-flight bounds, connections, replica ceiling and
// batch size that in.Account allows at in.ServiceTime per request. It is
// pure: Little's law (in flight = rate × service time) and rounding.
func Plan(in Input) (Result, error) {
	a := in.Account
	switch {
	case in.ServiceTime <= 0:
		return Result{}, fmt.Errorf("plan: %s: the service time must be > 0 (a Go duration such as 800ms), got %s", in.Source, in.ServiceTime)
	case in.Replicas <= 0:
		return Result{}, fmt.Errorf("plan: --replicas must be > 0, got %d", in.Replicas)
	case in.TokensPerRequest < 0:
		return Result{}, fmt.Errorf("plan: --tokens-per-request must be >= 0 (0 = not given), got %d", in.TokensPerRequest)
	case a.RequestsPerMinute <= 0:
		return Result{}, fmt.Errorf("plan: account.requests_per_minute must be > 0, got %d", a.RequestsPerMinute)
	}
	lat := FmtDuration(in.ServiceTime)
	minutesPerL := 60 * float64(time.Second) / float64(in.ServiceTime) // 60 / L: a per-minute rate ÷ this = in flight
	r := Result{
		ServiceTimeSeconds: in.ServiceTime.Seconds(),
		Replicas:           in.Replicas,
		RequestsPerSecond:  float64(a.RequestsPerMinute) / 60,
		Notes:              []string{},
		BoundBy:            BoundRequests,
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
			r.FleetInFlight, r.BoundBy, boundRate = byTokens, BoundTokens, tokenRate
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
		if r.BoundBy == BoundTokens {
			check = "--tokens-per-request and " + check
		}
		return Result{}, fmt.Errorf("plan: %w: at %s per request the account's rate keeps fewer than one request in flight on average "+
			"(%s), so there is no in-flight bound to plan — a single worker sending one request at a time would already exceed the allowance, "+
			"and the rate alone limits it; check %s (the mean service time per request, such as 800ms)", ErrZeroBound, lat, r.Why, check)
	}
	if a.MaxInFlight > 0 && a.MaxInFlight < r.FleetInFlight {
		rate := "request rate"
		if r.BoundBy == BoundTokens {
			rate = "token rate"
		}
		note("account.max_in_flight (%d) is tighter than the %d the account's %s allows: at %s per request the fleet completes at most %.2f requests/s of the %.2f the account serves; raise account.max_in_flight to %d to use the whole allowance",
			a.MaxInFlight, r.FleetInFlight, rate, lat, float64(a.MaxInFlight)/in.ServiceTime.Seconds(), boundRate, r.FleetInFlight)
		r.Why = fmt.Sprintf("tighter than the %d the account's %s allows", r.FleetInFlight, rate)
		r.FleetInFlight, r.BoundBy = a.MaxInFlight, BoundMaxInFlight
	}

	r.PerProcessInFlight = ceilDiv(r.FleetInFlight, in.Replicas)
	r.MaxReplicas = ceilDiv(r.FleetInFlight, r.PerProcessInFlight)
	if r.MaxReplicas < in.Replicas {
		note("%d replicas × %d in flight ask for %d slots of %d: above %d replicas a worker cannot obtain capacity",
			in.Replicas, r.PerProcessInFlight, in.Replicas*r.PerProcessInFlight, r.FleetInFlight, r.MaxReplicas)
	}

	r.TransportConnections = proxy.ConnectionLimit(in.Upstream, r.PerProcessInFlight)
	if int64(r.TransportConnections) < r.PerProcessInFlight {
		derived := in.Upstream
		derived.MaxConnections = 0
		r.TransportConnections = proxy.ConnectionLimit(derived, r.PerProcessInFlight)
		note("upstream.max_connections (%d) is below the per-process bound %d, so the pool would be a second, accidental gate: raise it to at least %d, or set 0 to derive %d",
			in.Upstream.MaxConnections, r.PerProcessInFlight, r.PerProcessInFlight, r.TransportConnections)
	}

	grace := in.ShutdownGrace
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

// FmtDuration shows a service time to the millisecond (microsecond below 10ms).
func FmtDuration(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// upstreamHistogram is the metric whose sum / count is the mean service time.
const upstreamHistogram = "meterproxy_upstream_duration_seconds"

// ScrapeServiceTime reads base's /metrics and returns the mean upstream
// service time over every class, and how many requests it averages.
func ScrapeServiceTime(ctx context.Context, base string) (time.Duration, uint64, error) {
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
