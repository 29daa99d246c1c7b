//go:build load

package test

import (
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// hostedShape is one run of TestAdaptiveBoundHostedShape: a provider
// answering every request in latency, at rpm requests a minute, and
// interactive's reserve.
type hostedShape struct {
	name    string
	latency time.Duration
	rpm     int
	reserve float64
}

// TestAdaptiveBoundHostedShape: a hosted provider's shape, where the rate
// binds and there is no knee (issue 32). Every request takes the same time
// whatever the load; the provider allows rpm requests a minute (refilled
// continuously, with its rate-limit headers) and the account says so;
// max_in_flight is 200 and the classes are as a user writes them:
// interactive {share: 0.5, reserve: r} at 0.5 a second, bulk {share: 0.5,
// borrow: true} with 80 closed-loop workers — at the default reserve (0.3)
// and at 0.2. The bound starts at the floor and must grow until the rate
// (or the workers), not the bound, limits bulk: over the last 10 s of 36
// bulk does at least 80% of what the rate leaves it (rpm/60 × (1 − r)
// a second, or 80 workers over the latency where that is less), and the
// provider answers no 429. The four runs go at once.
//
// At 2 s a request and 1,200 a minute bulk needs 23–26 in flight. At 8 s
// a request it needs 80 (its workers, at 10 a second, all in flight):
// that run is scaled down four times — 2 s a request at 4,800 a minute,
// which needs the same 80 in flight — since the growth it takes is
// counted in latencies (each doubling waits out one and is judged on the
// next), and at 8 s it is a minute and more (quota's
// TestAdaptiveHostedShape simulates 8 s itself: 58–82 s).
func TestAdaptiveBoundHostedShape(t *testing.T) {
	shapes := []hostedShape{
		{"2 s, default reserve", 2 * time.Second, 1200, 0.3},
		{"2 s, reserve 0.2", 2 * time.Second, 1200, 0.2},
		{"8 s scaled, default reserve", 2 * time.Second, 4800, 0.3},
		{"8 s scaled, reserve 0.2", 2 * time.Second, 4800, 0.2},
	}
	const workers, warm, measure = 80, 26 * time.Second, 10 * time.Second
	runs := make([]kneeRun, len(shapes))
	throttled := make([]int, len(shapes))
	var wg sync.WaitGroup
	for i, c := range shapes {
		wg.Go(func() {
			l := startAdaptiveLoad(t, loadShape{
				fake:        fakeprovider.Config{Latency: c.latency, RPM: c.rpm},
				bulkWorkers: workers,
				interactive: 2 * time.Second,
				set: func(cfg config) {
					cfg.set("account.requests_per_minute", c.rpm)
					cfg.set("account.adaptive_in_flight", true)
					cfg.set("classes.interactive.share", 0.5)
					cfg.set("classes.interactive.reserve", c.reserve)
					cfg.set("classes.bulk.share", 0.5)
					cfg.set("classes.bulk.borrow", true)
				},
			})
			defer l.stop()
			l.run(warm)
			runs[i] = l.measure(measure)
			throttled[i] = l.fake.Stats().RateLimited
		})
	}
	wg.Wait()
	for i, c := range shapes {
		got := runs[i]
		want := 0.8 * min(float64(c.rpm)/60*(1-c.reserve), workers/c.latency.Seconds())
		t.Logf("%s: bound %.0f, bulk %.1f/s (want ≥ %.1f), %.1f in service at the server, %d upstream 429s",
			c.name, got.bound, got.bulkPerSecond, want, got.inService, throttled[i])
		if got.bulkPerSecond < want {
			t.Errorf("%s: bulk %.1f a second, want ≥ %.1f: the rate, not the bound, should limit it", c.name, got.bulkPerSecond, want)
		}
		if throttled[i] != 0 {
			t.Errorf("%s: %d upstream 429s, want none: the proxy let more through than its account allows", c.name, throttled[i])
		}
	}
}
