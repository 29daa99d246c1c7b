//go:build load

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// kneeRun is what one measurement of an adaptiveLoad saw: completions a
// second at the server, the mean number in service there (Little's law on
// Stats.Busy), the interactive requests' latency, and the bound.
type kneeRun struct {
	perSecond, inService float64
	bulkPerSecond        float64 // bulk workers' requests answered 200 a second
	interactiveP50       time.Duration
	bound                float64 // meterproxy_in_flight_limit at the end
}

// loadShape is a run of the adaptive tests: the server behind the proxy,
// the proxy's config, and the callers' load.
type loadShape struct {
	fake        fakeprovider.Config
	bulkWorkers int           // closed loop: each sends its next request when its last is answered
	interactive time.Duration // one interactive request every so often, answered or not; 0: none
	set         func(config)  // the test's own config on top of adaptiveConfig's
	env         []string      // the proxy's environment besides fleetEnv (a further caller's key)
}

// adaptiveLoad is a proxy in front of a fake provider under a loadShape's
// load, run in phases: let it run, measure, change the server (SetSlots),
// measure again. stop ends the load; it is also stopped at cleanup, before
// the proxy.
type adaptiveLoad struct {
	t     *testing.T
	fake  *fakeprovider.Provider
	proxy *procs.Proxy

	ctx    context.Context //nolint:containedctx // the load's, which stop cancels
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	client   *http.Client
	bulkDone atomic.Int64 // bulk workers' requests answered 200

	mu          sync.Mutex
	interactive []answered // interactive requests answered 200

	started time.Time
	last    adaptiveView // the controller as run last saw it
	trail   []string     // the controller's decisions as run saw them, logged if the test fails
}

// adaptiveView is the part of /admin/state's adaptive section the tests
// follow: the bound, the controller's phase and its last decision.
type adaptiveView struct {
	Bound int    `json:"bound"`
	Phase string `json:"phase"`
	Last  struct {
		Action string `json:"action"`
		From   int    `json:"from"`
		To     int    `json:"to"`
		Why    string `json:"why"`
	} `json:"last_decision"`
	Work    float64 `json:"work_per_second"`          // the last measurement judged
	Latency float64 `json:"latency_seconds_per_work"` // its latency per unit of work
}

// answered is one request's answer: when it came and how long it took.
type answered struct {
	at   time.Time
	took time.Duration
}

// startAdaptiveLoad starts the fake, the proxy (callers chat-frontend and
// nightly-import, a generous account RPM, max_in_flight 200, bulk waiting up
// to 60 s, then shape.set) and the load.
func startAdaptiveLoad(t *testing.T, shape loadShape) *adaptiveLoad {
	t.Helper()
	shape.fake.NoLog = true // a long run's request log would only grow
	fake := fakeprovider.New(shape.fake)
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.withCallers()
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("account.max_in_flight", 200)
	cfg.set("classes.bulk.max_wait", "60s")
	if shape.set != nil {
		shape.set(cfg)
	}
	p := startProxy(t, cfg, append(slices.Clone(fleetEnv), shape.env...), chatKey, importKey)
	ctx, cancel := context.WithCancel(t.Context())
	l := &adaptiveLoad{t: t, fake: fake, proxy: p, cancel: cancel, started: time.Now(), ctx: ctx,
		client: newClient(t, shape.bulkWorkers+16)}
	t.Cleanup(func() { // runs before the proxy's stop, registered earlier
		l.stop()
		if len(l.trail) > 0 { // with -v or on failure
			t.Logf("the adaptive bound's decisions, as /admin/state showed them:\n%s", strings.Join(l.trail, "\n"))
		}
	})
	client := l.client
	l.join(shape.bulkWorkers, func(ctx context.Context, c *http.Client, url string) int {
		status, _ := fairSend(ctx, c, url, importKey)
		return status
	})
	if shape.interactive > 0 {
		tickUntil(ctx, &l.wg, shape.interactive, func() {
			if status, took := fairSend(ctx, client, p.URL, chatKey); status == 200 {
				l.mu.Lock()
				l.interactive = append(l.interactive, answered{time.Now(), took})
				l.mu.Unlock()
			}
		})
	}
	return l
}

// sender sends one request to the proxy at url and returns its status (0
// when none came back).
type sender func(ctx context.Context, c *http.Client, url string) int

// join adds n bulk workers to the load, each a closed loop of send; their
// answers 200 count in bulkPerSecond.
func (l *adaptiveLoad) join(n int, send sender) {
	for range n {
		l.wg.Go(func() {
			for l.ctx.Err() == nil {
				if send(l.ctx, l.client, l.proxy.URL) == http.StatusOK {
					l.bulkDone.Add(1)
				}
			}
		})
	}
}

// every adds a sender of one request each period, answered or not, to the
// load; its answers are not counted.
func (l *adaptiveLoad) every(period time.Duration, send sender) {
	tickUntil(l.ctx, &l.wg, period, func() { send(l.ctx, l.client, l.proxy.URL) })
}

// follow is how often run reads /admin/state: often enough to see each of
// the controller's decisions, one per 2 s interval.
const follow = 500 * time.Millisecond

// run lets the load run for d — the length of a phase, not a
// synchronisation — following the controller's decisions meanwhile.
func (l *adaptiveLoad) run(d time.Duration) {
	l.runUntil(d, func(adaptiveView) bool { return false })
}

// runUntil lets the load run until done holds for the controller's view or
// d has passed, and reports whether done held.
func (l *adaptiveLoad) runUntil(d time.Duration, done func(adaptiveView) bool) bool {
	end := time.After(d)
	tick := time.NewTicker(follow)
	defer tick.Stop()
	for {
		select {
		case <-end:
			return false
		case <-tick.C:
			if l.look() && done(l.last) {
				return true
			}
		}
	}
}

// look reads the controller's view from /admin/state into l.last and adds
// a line to the trail when it changed; false when it could not be read.
func (l *adaptiveLoad) look() bool {
	req, err := http.NewRequestWithContext(l.t.Context(), http.MethodGet, l.proxy.AdminURL+"/admin/state", nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = res.Body.Close() }()
	var state struct {
		Adaptive *adaptiveView `json:"adaptive"`
	}
	if err := json.NewDecoder(res.Body).Decode(&state); err != nil || state.Adaptive == nil {
		return false
	}
	if *state.Adaptive != l.last {
		v := *state.Adaptive
		l.trail = append(l.trail, fmt.Sprintf("%5.1fs bound %d, %s: %s %d→%d (%s); judged %.1f/s at %.3g s/work", time.Since(l.started).Seconds(),
			v.Bound, v.Phase, v.Last.Action, v.Last.From, v.Last.To, v.Last.Why, v.Work, v.Latency))
	}
	l.last = *state.Adaptive
	return true
}

// measure runs the load for d and reports what the server and the
// interactive callers saw over it, and the bound at its end.
func (l *adaptiveLoad) measure(d time.Duration) kneeRun {
	before, bulkBefore, start := l.fake.Stats(), l.bulkDone.Load(), time.Now()
	l.run(d)
	after, bulkAfter, end := l.fake.Stats(), l.bulkDone.Load(), time.Now()
	elapsed := end.Sub(start)
	l.mu.Lock()
	var took []time.Duration
	for _, a := range l.interactive {
		if !a.at.Before(start) && !a.at.After(end) {
			took = append(took, a.took)
		}
	}
	l.mu.Unlock()
	slices.Sort(took)
	var p50 time.Duration
	if len(took) > 0 {
		p50 = took[len(took)/2]
	}
	return kneeRun{
		perSecond:      float64(after.Served-before.Served) / elapsed.Seconds(),
		bulkPerSecond:  float64(bulkAfter-bulkBefore) / elapsed.Seconds(),
		inService:      (after.Busy - before.Busy).Seconds() / elapsed.Seconds(),
		interactiveP50: p50,
		bound:          sum(scrape(l.t, l.proxy.AdminURL), "meterproxy_in_flight_limit", map[string]string{"pool": "default"}),
	}
}

// stop ends the load and waits for its requests; it may be called again.
func (l *adaptiveLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// runKnee puts a proxy configured by set in front of a fake server with
// slots slots at 200 ms, and runs bulk workers (closed loop) beside
// interactive requests at 2 a second for warm, then measures for
// measureFor.
func runKnee(t *testing.T, slots, bulkWorkers int, warm, measureFor time.Duration, set func(config)) kneeRun {
	t.Helper()
	l := startAdaptiveLoad(t, loadShape{
		fake:        fakeprovider.Config{Latency: 200 * time.Millisecond, Slots: slots},
		bulkWorkers: bulkWorkers,
		interactive: 500 * time.Millisecond,
		set:         set,
	})
	defer l.stop()
	l.run(warm)
	return l.measure(measureFor)
}

// TestAdaptiveBoundFindsTheKnee: a server with 8 slots at 200 ms (40
// completions a second at most), 60 bulk workers and interactive at 2 a
// second. With adaptive_in_flight the bound finds the knee within 25 s:
// ≥ 34 completions a second, ≤ 16 in service at the server on average,
// interactive p50 ≤ 500 ms. A static bound of 200 beside it gets the same
// completions but queues everything inside the server (issue 24).
func TestAdaptiveBoundFindsTheKnee(t *testing.T) {
	var adaptive, static kneeRun
	var wg sync.WaitGroup
	wg.Go(func() {
		adaptive = runKnee(t, 8, 60, 25*time.Second, 10*time.Second, func(c config) { c.set("account.adaptive_in_flight", true) })
	})
	wg.Go(func() { static = runKnee(t, 8, 60, 25*time.Second, 10*time.Second, func(config) {}) })
	wg.Wait()
	t.Logf("adaptive: bound %.0f, %.1f completions/s, %.1f in service at the server, interactive p50 %v",
		adaptive.bound, adaptive.perSecond, adaptive.inService, adaptive.interactiveP50)
	t.Logf("static 200: %.1f completions/s, %.1f in service at the server, interactive p50 %v",
		static.perSecond, static.inService, static.interactiveP50)
	if adaptive.perSecond < 34 {
		t.Errorf("adaptive: %.1f completions a second, want ≥ 34 of the 40 the server can do", adaptive.perSecond)
	}
	if adaptive.inService > 16 {
		t.Errorf("adaptive: %.1f in service at the server on average, want ≤ 16 (8 slots)", adaptive.inService)
	}
	if adaptive.interactiveP50 == 0 || adaptive.interactiveP50 > 500*time.Millisecond {
		t.Errorf("adaptive: interactive p50 %v, want ≤ 500 ms", adaptive.interactiveP50)
	}
}
