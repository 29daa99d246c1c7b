package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// testConfig is the base of the store-independent limiter suite.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Account.RequestsPerMinute = 60000
	cfg.Account.MaxInFlight = 100
	cfg.Classes.Interactive = interactiveConfig{Share: 1, MaxWait: 10 * time.Second, MaxQueue: 10}
	cfg.Classes.Bulk = BulkConfig{Share: 0, Borrow: false, MaxWait: 10 * time.Second, MaxQueue: 2} // bulk never admitted
	return cfg
}

// runLimiterSuite is the limiter's behaviour over any Store, in real time:
// one caller served in arrival order (FIFO), max_wait, max_queue,
// disconnect, in-flight release.
// With prefetch the limiter takes credits ahead of demand; the behaviour
// must be the same.
func runLimiterSuite(t *testing.T, newStore func(t *testing.T, cfg Config) store.Store, prefetch bool) {
	start := func(t *testing.T, cfg Config) *limiter {
		t.Helper()
		l := newLimiter(cfg, cfg.Limits(), newStore(t, cfg), time.Second, slog.New(slog.DiscardHandler))
		if prefetch {
			l.enablePrefetch()
		}
		runtest.Start(t, l)
		return l
	}
	t.Run("FIFO", func(t *testing.T) {
		cfg := testConfig()
		cfg.Account.RequestsPerMinute = 60 // one a second: each admission in its own second
		l := start(t, cfg)
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i) // admissions are a second apart: no race for the order
				mu.Unlock()
				lease.Release()
			})
			waitUntil(t, "the request to queue or pass", func() bool { return l.Queued(classify.Interactive)+len(snapshot(&mu, &order)) == i+1 })
		}
		wg.Wait()
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Errorf("admitted in order %v, want [0 1 2]", order)
		}
	})
	t.Run("max_queue refuses at once", func(t *testing.T) {
		l := start(t, testConfig())
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { _, _ = l.Admit(ctx, Request{Class: classify.Bulk}) })
		}
		waitUntil(t, "two bulk waiters", func() bool { return l.Queued(classify.Bulk) == 2 })
		if _, err := l.Admit(ctx, Request{Class: classify.Bulk}); !errors.Is(err, gate.ErrQueueFull) {
			t.Errorf("third: %v, want ErrQueueFull", err)
		}
		cancel()
		wg.Wait()
	})
	t.Run("max_wait refuses with Retry-After", func(t *testing.T) {
		cfg := testConfig()
		cfg.Classes.Bulk.MaxWait = 100 * time.Millisecond
		l := start(t, cfg)
		_, err := l.Admit(t.Context(), Request{Class: classify.Bulk})
		var refused *gate.RefusedError
		if !errors.As(err, &refused) || !errors.Is(err, gate.ErrWaitTimeout) || refused.RetryAfter < time.Second {
			t.Errorf("got %v, want ErrWaitTimeout with RetryAfter >= 1s", err)
		}
		if q := l.Queued(classify.Bulk); q != 0 {
			t.Errorf("queued %d after the refusal", q)
		}
	})
	t.Run("disconnect leaves the queue", func(t *testing.T) {
		l := start(t, testConfig())
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := l.Admit(ctx, Request{Class: classify.Bulk}); errc <- err }()
		waitUntil(t, "a bulk waiter", func() bool { return l.Queued(classify.Bulk) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Admit: %v, want context.Canceled", err)
		}
		if q := l.Queued(classify.Bulk); q != 0 {
			t.Errorf("queued %d after the client left", q)
		}
	})
	t.Run("a release admits the next", func(t *testing.T) {
		cfg := testConfig()
		cfg.Account.MaxInFlight = 2
		l := start(t, cfg)
		a, errA := l.Admit(t.Context(), Request{Class: classify.Interactive})
		b, errB := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		got := admitLater(t, l, classify.Interactive)
		waitUntil(t, "a waiter behind two", func() bool { return l.Queued(classify.Interactive) == 1 })
		a.Release()
		c := <-got
		b.Release()
		c.Release()
		waitUntil(t, "the store to hear of every release", func() bool {
			return l.FleetInFlight(classify.Interactive) == 0 && l.InFlight(classify.Interactive) == 0
		})
	})
}

// admitLater admits a request of class c in the background and delivers
// its lease (nil after an error, which fails the test).
func admitLater(t *testing.T, l *limiter, c classify.Class) <-chan *Lease {
	got := make(chan *Lease, 1)
	go func() {
		lease, err := l.Admit(t.Context(), Request{Class: c})
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	return got
}

func snapshot(mu *sync.Mutex, s *[]int) []int {
	mu.Lock()
	defer mu.Unlock()
	return append([]int(nil), *s...)
}

func TestLimiterOverMemory(t *testing.T) {
	runLimiterSuite(t, func(_ *testing.T, _ Config) store.Store { return store.NewMemory(nil) }, false)
}
