package quota

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// prefetchLimiter runs a limiter with prefetch over its own Redis keys and
// counts its store calls.
func prefetchLimiter(t testing.TB, srv *redistest.Server, cfg Config) (*limiter, *atomic.Int64) {
	t.Helper()
	l := newLimiter(cfg, cfg.Limits(), newTestRedisStore(t, srv, redistest.Prefix(t)), time.Second, slog.New(slog.DiscardHandler))
	l.enablePrefetch()
	calls := &atomic.Int64{}
	l.OnStoreCall(func(time.Duration, error) { calls.Add(1) })
	runtest.Start(t, l)
	return l, calls
}

// admitFor admits and releases class c requests from workers goroutines
// back to back for d, and returns how many were admitted.
func admitFor(t *testing.T, l *limiter, c classify.Class, workers int, d time.Duration) int64 {
	var n atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				lease, err := l.Admit(t.Context(), Request{Class: c})
				if err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
				lease.Release()
			}
		})
	}
	wg.Wait()
	return n.Load()
}

// TestPrefetchSavesRoundTrips: far from every limit, admissions come from
// credits, so store calls are a fraction of admissions, and every credit
// goes back to the store once the load stops.
func TestPrefetchSavesRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig()
	cfg.Account.RequestsPerMinute = 60_000_000
	cfg.Account.MaxInFlight = 1000
	l, calls := prefetchLimiter(t, srv, cfg)
	n := admitFor(t, l, classify.Interactive, 2, 1500*time.Millisecond)
	perAdmission := float64(calls.Load()) / float64(n)
	t.Logf("%d admissions, %d store calls: %.3f a request", n, calls.Load(), perAdmission)
	if perAdmission > 0.5 {
		t.Errorf("%.3f store calls per admission with prefetch, want <= 0.5", perAdmission)
	}
	waitUntil(t, "every credit back in the store", func() bool { return l.FleetInFlight(classify.Interactive) == 0 })
}

// TestPrefetchNeverExceedsTheWindow: near the limit there are no credits,
// so a second admits no more than its allowance.
func TestPrefetchNeverExceedsTheWindow(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig()
	cfg.Account.RequestsPerMinute = 6000 // 100 a second
	l, _ := prefetchLimiter(t, srv, cfg)
	var mu sync.Mutex
	perSec := map[int64]int{}
	stop := time.Now().Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
				if err != nil {
					return // max_wait at the end of the run
				}
				sec := l.Window().Sec // the store's second of the last call
				mu.Lock()
				perSec[sec]++
				mu.Unlock()
				lease.Release()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range perSec {
		total += n
	}
	// Lease times are read after the fact, so judge the run as a whole:
	// at most 100 a second over the seconds it touched.
	if limit := 100 * (len(perSec) + 1); total > limit {
		t.Errorf("%d admitted over %d seconds %v, limit 100 a second", total, len(perSec), perSec)
	}
}

// TestPrefetchDropsBulkCreditsOnAHold: once the upstream says to hold
// bulk, no bulk credit is spent.
func TestPrefetchDropsBulkCreditsOnAHold(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig()
	cfg.Account.RequestsPerMinute = 60_000_000
	cfg.Account.MaxInFlight = 1000
	cfg.Classes.Interactive = interactiveConfig{Share: 0.5, Reserve: 0.1, MaxWait: 10 * time.Second, MaxQueue: 10}
	cfg.Classes.Bulk = BulkConfig{Share: 0.5, Borrow: true, MaxWait: 300 * time.Millisecond, MaxQueue: 10}
	l, _ := prefetchLimiter(t, srv, cfg)
	admitFor(t, l, classify.Bulk, 2, 500*time.Millisecond) // builds bulk credits
	l.queue.mu.Lock()
	credits := l.queue.credits.n[classify.Bulk]
	l.queue.mu.Unlock()
	l.Observe(time.Now(), time.Minute, 0)
	lease, err := l.Admit(t.Context(), Request{Class: classify.Bulk})
	if err == nil {
		lease.Release()
		t.Fatalf("bulk admitted during an upstream hold (it had %d credits before the hold)", credits)
	}
	t.Logf("bulk credits before the hold: %d; after: refused with %v", credits, err)
}

// BenchmarkPrefetchPaced admits bulk requests arriving on a 500 µs ticker
// (about 1,000 a second on a loaded 2-core machine: ns/op is the real
// spacing), each held 1 ms, as open-loop traffic does, and reports the
// store calls per admission. Far from every limit, credits serve most.
//
//	go test -run '^$' -bench PrefetchPaced -benchtime 4000x ./quota
func BenchmarkPrefetchPaced(b *testing.B) {
	srv := redistest.Start(b)
	cfg := testConfig()
	cfg.Account.RequestsPerMinute = 60_000_000
	cfg.Account.MaxInFlight = 4096
	cfg.Classes.Interactive.Share = 0.8
	cfg.Classes.Bulk = BulkConfig{Share: 0.2, Borrow: true, MaxWait: 10 * time.Second, MaxQueue: 100}
	l, calls := prefetchLimiter(b, srv, cfg)
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	calls.Store(0)
	for b.Loop() {
		<-tick.C // pacing the arrivals, not waiting for anything
		wg.Go(func() {
			lease, err := l.Admit(b.Context(), Request{Class: classify.Bulk})
			if err != nil {
				b.Error(err)
				return
			}
			time.Sleep(time.Millisecond) // the request's upstream time
			lease.Release()
		})
	}
	wg.Wait()
	b.ReportMetric(float64(calls.Load())/float64(b.N), "calls/admission")
}
