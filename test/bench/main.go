// Command bench measures meterproxy against a plain httputil.ReverseProxy
// and nginx in one run, on loopback: the fake provider hit directly, the
// baseline proxy, nginx (when installed: Debian's nginx-light; skipped,
// its targets not measured, otherwise), meterproxy on its in-process store
// and meterproxy on Redis (a redis-server it starts). Open-loop runs at fixed rates (vegeta) give
// latency percentiles and errors; a closed-loop run gives the most each
// can do; /proc gives CPU time per request and memory; Redis's
// commandstats give commands per request; the proxy package's handler
// benchmark gives allocations per request; a streamed run gives
// time-to-first-byte and counts streams cut short; a CPU profile under
// closed-loop load gives the scheduler's, GC's and system calls' shares;
// meterproxy with 1 and with 50 pools gives its CPU idle and at 1,000/s. It prints one Markdown
// report with ratios to the baseline and the targets, and exits 3
// when one is missed.
//
//	go run ./test/bench [-duration 10s] [-rates 1000,2000,5000] [-conns 32] [-held 10000] [-nginx PATH]
//
// `make bench` runs it. The load generator shares the machine with what it
// measures, so only ratios within one run mean anything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

type options struct {
	duration, warmup, streamFor time.Duration
	rates                       []int
	conns, held                 int
	heldOnly, adaptive          bool
	nginx                       string // nginx's path; "" looks it up, "off" skips it
}

func main() {
	baseline := flag.String("serve-baseline", "", "internal: serve the baseline proxy on this address")
	upstream := flag.String("upstream", "", "internal: the baseline's upstream")
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "closed-loop warm-up of each target before measuring")
	flag.DurationVar(&o.streamFor, "streams", 5*time.Second, "length of each streamed run")
	rates := flag.String("rates", "1000,2000,5000", "open-loop rates, requests a second")
	flag.IntVar(&o.conns, "conns", 32, "connections (concurrent callers) of every run")
	flag.IntVar(&o.held, "held", 10000, "bulk requests held in the queue for the memory figure")
	flag.BoolVar(&o.heldOnly, "held-only", false, "measure only the memory of held requests (for profiling)")
	flag.StringVar(&o.nginx, "nginx", "", `nginx's path (default: on PATH or /usr/sbin/nginx; "off" skips it)`)
	flag.BoolVar(&o.adaptive, "adaptive", false, "meterproxy's pools with adaptive_in_flight, the bound pinned at max_in_flight (what measuring costs)")
	flag.Parse()
	if *baseline != "" {
		ln, err := net.Listen("tcp", *baseline)
		if err == nil {
			err = serveBaseline(ln, *upstream)
		}
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
	for r := range strings.SplitSeq(*rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -rates: %q is not a positive number\n", r)
			os.Exit(2)
		}
		o.rates = append(o.rates, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	logf("held over HTTP/1.1: %.0f B each; h2c: %.0f B each", rep.held.perRequest(), rep.heldH2C.perRequest())
	if o.heldOnly {
		return
	}
	fmt.Print(rep.markdown(o))
	miss, skipped := rep.missed()
	if len(skipped) > 0 {
		fmt.Fprintf(os.Stderr, "bench: targets not measured: %s\n", strings.Join(skipped, "; "))
	}
	if len(miss) > 0 {
		fmt.Fprintf(os.Stderr, "bench: targets missed: %s\n", strings.Join(miss, "; "))
		os.Exit(3)
	}
}

// run builds the binaries, starts every target and measures them.
func run(ctx context.Context, o options) (*report, error) {
	root, err := procs.ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "meterproxy-bench-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	logf("building meterproxy and fakeprovider (release flags)")
	mpBin, err := procs.Build(ctx, root, dir, "meterproxy")
	if err != nil {
		return nil, err
	}
	fakeBin, err := procs.Build(ctx, root, dir, "fakeprovider")
	if err != nil {
		return nil, err
	}
	rs, err := startRedis(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer rs.stop()
	fake, err := startFake(ctx, fakeBin, 5*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer fake.stop()
	base, err := startBaseline(ctx, fake.url)
	if err != nil {
		return nil, err
	}
	defer base.stop()
	ngx, ngxNote, err := maybeNginx(ctx, o, dir, fake.url)
	if err != nil {
		return nil, err
	}
	if ngx != nil {
		defer ngx.stop()
	}
	config := func(redisURL string) map[string]any {
		cfg := meterproxyConfig(fake.url, redisURL, nil)
		if o.adaptive {
			pinAdaptive(cfg)
		}
		return cfg
	}
	local, err := startMeterproxy(ctx, mpBin, dir, "meterproxy-local", config(""))
	if err != nil {
		return nil, err
	}
	defer local.stop()
	shared, err := startMeterproxy(ctx, mpBin, dir, "meterproxy-redis", config(rs.url))
	if err != nil {
		return nil, err
	}
	defer shared.stop()
	// The access log's cost: the Redis store's configuration with the
	// access log written to a file, beside it measured with it off.
	logPath := filepath.Join(dir, "access.log")
	logged, err := startMeterproxy(ctx, mpBin, dir, "meterproxy-log", withAccessLog(config(rs.url), logPath))
	if err != nil {
		return nil, err
	}
	defer logged.stop()
	targets := []*target{fake, base, local, shared, logged}
	if ngx != nil {
		targets = []*target{fake, base, ngx, local, shared, logged}
	}
	rep := newReport(targets)
	rep.nginx, rep.nginxRan = ngxNote, ngx != nil
	if o.heldOnly {
		return rep, measureHeld(ctx, rep, mpBin, dir, fake.url, o.held)
	}

	for _, t := range targets {
		logf("warming up %s", t.name)
		closedLoop(t, o.warmup, o.conns)
	}
	for _, rate := range o.rates {
		rep.open[rate] = map[string]runResult{}
		for _, t := range targets {
			logf("%s: open loop at %d/s for %s", t.name, rate, o.duration)
			r, err := measure(ctx, t, redisFor(t, shared, rs), func() *metricsT { return openLoop(t, rate, o.duration, o.conns) })
			if err != nil {
				return nil, err
			}
			rep.open[rate][t.name] = r
		}
	}
	for _, t := range targets {
		logf("%s: closed loop, %d connections, %s", t.name, o.conns, o.duration)
		r, err := measure(ctx, t, redisFor(t, shared, rs), func() *metricsT { return closedLoop(t, o.duration, o.conns) })
		if err != nil {
			return nil, err
		}
		rep.closed[t.name] = r
	}
	for _, t := range targets {
		logf("%s: streams, %d workers, %s", t.name, o.conns, o.streamFor)
		rep.streams[t.name] = streams(ctx, t, o.streamFor, o.conns)
	}
	if rep.storeErrors, err = storeErrors(ctx, shared.adminURL); err != nil {
		return nil, err
	}
	if rep.accessLines, rep.accessDropped, err = accessLogLines(ctx, logged, logPath); err != nil {
		return nil, err
	}
	logf("%s: CPU profile over a closed loop of %s", shared.name, o.duration)
	if rep.cost.profile, err = profileRun(ctx, shared, o.duration, o.conns); err != nil {
		return nil, err
	}
	if err := measurePools(ctx, rep, mpBin, dir, fake.url, rs, o.duration, goalRate, o.conns); err != nil {
		return nil, err
	}
	logf("handler allocations (go test -bench BenchmarkHandler ./proxy)")
	if rep.allocs, err = handlerAllocs(ctx, root); err != nil {
		return nil, err
	}
	return rep, measureHeld(ctx, rep, mpBin, dir, fake.url, o.held)
}

// measureHeld starts a meterproxy that holds every bulk request and reads
// its memory with n of them waiting.
func measureHeld(ctx context.Context, rep *report, bin, dir, upstream string, n int) error {
	logf("memory with %d bulk requests held", n)
	held, err := startMeterproxy(ctx, bin, dir, "meterproxy-held", heldConfig(upstream, n))
	if err != nil {
		return err
	}
	if rep.held, err = holdRequests(ctx, held, n, false); err != nil {
		return err
	}
	held.stop()
	logf("memory with %d bulk requests held over h2c", n)
	held, err = startMeterproxy(ctx, bin, dir, "meterproxy-held-h2c", heldConfig(upstream, n))
	if err != nil {
		return err
	}
	defer held.stop()
	rep.heldH2C, err = holdRequests(ctx, held, n, true)
	return err
}

// maybeNginx starts nginx in front of upstream when it is installed (and
// not -nginx off), and says how it runs or why it does not.
func maybeNginx(ctx context.Context, o options, dir, upstream string) (*target, string, error) {
	if o.nginx == "off" {
		return nil, "skipped (-nginx off)", nil
	}
	bin := o.nginx
	if bin == "" {
		var err error
		if bin, err = findNginx(); err != nil {
			logf("skipping nginx: %v", err)
			return nil, "not installed: " + nginxHint, nil
		}
	}
	t, version, err := startNginx(ctx, bin, dir, upstream, o.conns)
	if err != nil {
		return nil, "", err
	}
	return t, fmt.Sprintf("%s, %d worker processes, access log off, upstream keepalive %d, proxy_buffering off; its CPU is the master's and workers' summed",
		version, nginxWorkers(), max(64, o.conns)), nil
}

// redisFor is the Redis server whose commands t's requests cost, or nil.
func redisFor(t, shared *target, rs *redisServer) *redisServer {
	if t == shared {
		return rs
	}
	return nil
}

// storeErrors reads meterproxy_store_errors_total: a Redis call that failed
// would have switched to local limits and skipped Redis, flattering the
// figures, so the report must show it was 0.
func storeErrors(ctx context.Context, admin string) (float64, error) {
	v, err := metricValue(ctx, admin, "meterproxy_store_errors_total ")
	if errors.Is(err, errNoMetric) {
		return 0, fmt.Errorf("no meterproxy_store_errors_total at %s", admin)
	}
	return v, err
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
