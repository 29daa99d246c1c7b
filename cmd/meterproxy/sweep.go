package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// maxSweepConcurrency bounds --max: a typo such as 64000 should not open
// tens of thousands of connections to a provider.
const maxSweepConcurrency = 10_000

// sweepFlags are the sweep command's own flags. run registers them only
// for sweep, so the other commands' usage does not change.
type sweepFlags struct {
	fs                       *flag.FlagSet
	url, model, path, keyEnv string
	step, svg                string
	start, max, maxTokens    int
	duration, timeout        time.Duration
}

// sweepFlagsFor registers sweep's flags on fs when cmd is sweep; otherwise
// it returns nil.
func sweepFlagsFor(cmd string, fs *flag.FlagSet) *sweepFlags {
	if cmd != "sweep" {
		return nil
	}
	f := &sweepFlags{fs: fs}
	fs.StringVar(&f.url, "url", "", "the upstream's base `URL`, e.g. http://127.0.0.1:8081 (default: upstream.url, with --config)")
	fs.StringVar(&f.model, "model", "", "the model every request names (not needed on an Azure deployment's path)")
	fs.StringVar(&f.path, "path", "", "the request path: a chat completions path or /v1/messages (default /v1/chat/completions; /v1/messages when upstream.provider is anthropic)")
	fs.StringVar(&f.keyEnv, "api-key-env", "", "name of the environment `VARIABLE` holding the upstream key (default: upstream.api_key when the URL is upstream.url); never printed")
	fs.IntVar(&f.maxTokens, "max-tokens", 128, "max_tokens of each request: make it your workload's typical output")
	fs.IntVar(&f.start, "start", 1, "the first concurrency")
	fs.IntVar(&f.max, "max", 64, "the highest concurrency tried")
	fs.StringVar(&f.step, "step", "1.5", "from one concurrency to the next: a factor above 1 (1.5, 2), or +N to add N")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "how long each concurrency runs")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "a request unanswered this long counts as a timeout error")
	fs.StringVar(&f.svg, "svg", "", "write throughput and latency against concurrency to this SVG `FILE`")
	return f
}

// errSweepInterrupted ends a sweep stopped by the operator, after the
// measured steps were printed.
var errSweepInterrupted = errors.New("sweep: interrupted; the table shows the steps measured before")

// runSweep is the sweep command: it ramps concurrency against the upstream
// step by step, reporting each step on stderr as it ends, then prints the
// table, the knee, the bound and what the sweep spent on stdout (and the
// SVG). It stops at the first 429, at --max, when a whole step fails,
// when a step's rate passes the provider's rate limit, or on ctx's end.
func runSweep(ctx context.Context, cfg Config, f *sweepFlags, getenv func(string) string, stdout, stderr io.Writer) error {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	target, err := sweepTargetOf(cfg, f, set, getenv)
	if err != nil {
		return err
	}
	rule, err := parseStep(f.step)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	sw := sweep{target: target, levels: sweepLevels(f.start, f.max, rule), rule: rule,
		duration: f.duration, timeout: f.timeout, max: f.max, maxTokens: f.maxTokens}
	res := sw.run(ctx, stderr)
	if err := res.print(stdout); err != nil {
		return err
	}
	if f.svg != "" {
		if err := os.WriteFile(f.svg, res.svg(), 0o600); err != nil {
			return fmt.Errorf("sweep: --svg: %w", err)
		}
	}
	if res.stop == stopInterrupted {
		return errSweepInterrupted
	}
	return nil
}

// check reports the numeric flags out of range, all at once.
func (f *sweepFlags) check() error {
	var errs []error
	if f.start < 1 || f.max < f.start || f.max > maxSweepConcurrency {
		errs = append(errs, fmt.Errorf("sweep: want 1 ≤ --start (%d) ≤ --max (%d) ≤ %d", f.start, f.max, maxSweepConcurrency))
	}
	if f.duration <= 0 || f.timeout <= 0 {
		errs = append(errs, fmt.Errorf("sweep: --duration (%s) and --timeout (%s) must be positive", f.duration, f.timeout))
	}
	if f.maxTokens < 1 {
		errs = append(errs, fmt.Errorf("sweep: --max-tokens (%d) must be at least 1", f.maxTokens))
	}
	return errors.Join(errs...)
}

// sweepTargetOf resolves the URL, path and key from the flags and the
// configuration. The configured key goes only to the configured URL: a
// --url elsewhere needs --api-key-env, so a production key is never sent
// to a host it was not configured for.
func sweepTargetOf(cfg Config, f *sweepFlags, set map[string]bool, getenv func(string) string) (sweepTarget, error) {
	base, key := f.url, ""
	fromConfig := set["config"] || getenv("METERPROXY_UPSTREAM_URL") != ""
	switch {
	case base == "" && !fromConfig:
		return sweepTarget{}, errors.New("sweep: --url is required (or --config, whose upstream.url is used)")
	case base == "" || (fromConfig && base == cfg.Upstream.URL):
		base, key = cfg.Upstream.URL, cfg.Upstream.APIKey
	}
	if f.keyEnv != "" {
		if key = getenv(f.keyEnv); key == "" {
			return sweepTarget{}, fmt.Errorf("sweep: --api-key-env %s: the variable is unset or empty", f.keyEnv)
		}
	}
	path := f.path
	switch {
	case path != "":
	case cfg.Upstream.Provider == "anthropic":
		path = "/v1/messages"
	case cfg.Upstream.Provider == "azure":
		return sweepTarget{}, errors.New("sweep: upstream.provider is azure: give --path /openai/deployments/NAME/chat/completions?api-version=…")
	default:
		path = "/v1/chat/completions"
	}
	return newSweepTarget(base, path, f.model, key, f.maxTokens)
}

// Why a sweep stopped.
const (
	stopMax         = "max"
	stopRateLimited = "429"
	stopFailed      = "failed"
	stopInterrupted = "interrupted"
	stopLimit       = "limit" // a step's rate passed the limit the provider's headers report
)

// sweep is one run of the command: the request, the levels and how long
// each runs.
type sweep struct {
	target            sweepTarget
	levels            []int
	rule              stepRule
	duration, timeout time.Duration
	max, maxTokens    int
}

// run measures each level in turn until one stops the ramp.
func (sw sweep) run(ctx context.Context, progress io.Writer) sweepResult {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = sw.levels[len(sw.levels)-1] // every worker keeps its connection between requests
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: sameHost}
	res := sweepResult{sweep: sw, stop: stopMax}
	began := time.Now()
	_, _ = fmt.Fprintf(progress, "sweep: %s\n", sw.header())
	for _, c := range sw.levels {
		s := sw.level(ctx, client, c)
		res.steps = append(res.steps, s)
		_, _ = fmt.Fprintf(progress, "sweep: concurrency %d: %.0f completions/min, p50 %s, errors %s\n",
			c, s.completionsPerMin, fmtLatency(s.p50), fmtErrors(s.errors))
		switch {
		case s.interrupted:
			res.stop = stopInterrupted
		case s.rateLimited:
			res.stop = stopRateLimited
		case s.answered == 0:
			res.stop = stopFailed
		case pastLimit(sw.target.api, res.steps):
			res.stop = stopLimit
		default:
			continue
		}
		break
	}
	res.wall = time.Since(began)
	return res
}

// header says what the sweep sends, and how it ramps.
func (sw sweep) header() string {
	return fmt.Sprintf("POST %s, max_tokens %d; concurrency %d to at most %d (%s), %s a step",
		sw.target.shown, sw.maxTokens, sw.levels[0], sw.max, sw.rule, sw.duration)
}

// level runs c closed-loop workers, each sending its next request as soon
// as its last is answered, then awaits the requests in flight. The step's
// window opens once every worker has had its first answer, and lasts the
// step's duration: the first round meets a server emptied by the last
// step's drain and answers faster than the level's steady state (at 32
// workers on 8 slots of 200 ms, 200 to 800 ms instead of 800), which in
// a short step would read as throughput past the knee. A 429 ends the
// step at once: the provider's rate limit binds, and pressing on would
// only spend its bucket. So does a first round without one answer (a
// wrong key, a refused connection): the step would only repeat it.
func (sw sweep) level(ctx context.Context, client *http.Client, c int) step {
	var (
		mu                    sync.Mutex
		outs                  []outcome
		warmed                int       // workers that had their first answer
		answered              int       // requests answered 2xx
		start, end, stoppedAt time.Time // the window, once warmed == c
		rateLimited           bool
		wg                    sync.WaitGroup
	)
	stopped := func() bool { // under mu
		return rateLimited || ctx.Err() != nil || (warmed == c && (answered == 0 || !time.Now().Before(end)))
	}
	for range c {
		wg.Go(func() {
			first := true
			for {
				mu.Lock()
				done := stopped()
				mu.Unlock()
				if done {
					return
				}
				o := sw.target.send(ctx, client, sw.timeout)
				mu.Lock()
				outs = append(outs, o)
				if o.kind == kindOK {
					answered++
				}
				if first {
					if first, warmed = false, warmed+1; warmed == c {
						start = time.Now()
						end = start.Add(sw.duration)
					}
				}
				if o.kind == "429" && !rateLimited {
					rateLimited, stoppedAt = true, o.end
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	interrupted := ctx.Err() != nil
	if interrupted {
		stoppedAt = time.Now()
	}
	if start.IsZero() { // stopped before every worker was answered: measure from the first send
		start = stoppedAt
		for _, o := range outs {
			start = earliest(start, o.start)
		}
	}
	if end.IsZero() || (!stoppedAt.IsZero() && stoppedAt.Before(end)) {
		end = stoppedAt
	}
	s := measure(c, start, end, outs)
	s.rateLimited, s.interrupted = rateLimited, interrupted
	return s
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
