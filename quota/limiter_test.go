package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// testLimiter starts a limiter over a store.Memory inside a synctest bubble
// and stops it when the test ends.
func testLimiter(t *testing.T, cfg Config) (*limiter, *store.Memory) {
	t.Helper()
	limits := cfg.PerReplica()
	store := store.NewMemory(nil)
	l := newLimiter(cfg, limits, store, 0, slog.New(slog.DiscardHandler))
	runtest.Start(t, l)
	return l, store
}

// smallConfig admits 2 interactive requests a second (no bulk share, no
// borrowing) and 100 in flight.
func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Account.RequestsPerMinute = 120
	cfg.Account.MaxInFlight = 100
	cfg.Classes.Interactive = interactiveConfig{Share: 1, Reserve: 0, MaxWait: 10 * time.Second, MaxQueue: 5}
	cfg.Classes.Bulk = BulkConfig{Share: 0, Borrow: false, MaxWait: 3 * time.Second, MaxQueue: 2}
	return cfg
}

func TestLimiterFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.RequestsPerMinute = 60 // one a second: each admission has its own instant
		l, _ := testLimiter(t, cfg)
		start := time.Now()
		var at [5]time.Duration
		var wg sync.WaitGroup
		for i := range at {
			wg.Go(func() {
				lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				lease.Release()
				at[i] = time.Since(start)
				if held := lease.Held(); held != (i > 0) {
					t.Errorf("request %d: Held() = %v, want %v", i, held, i > 0)
				}
			})
			synctest.Wait() // request i is queued before i+1
		}
		wg.Wait()
		for i, d := range at {
			if want := time.Duration(i) * time.Second; d != want {
				t.Errorf("request %d admitted at %s, want %s (first come, first served)", i, d, want)
			}
		}
	})
}

func TestLimiterMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Classes.Interactive.MaxWait = 1500 * time.Millisecond
		l, _ := testLimiter(t, cfg)
		start := time.Now()
		var errs [4]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
				if err == nil {
					lease.Release()
				}
				errs[i] = err
			})
			synctest.Wait()
		}
		wg.Wait()
		// Seconds 0 and 1 admit two each: all four within 1.5 s.
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		// Second 1 is spent; second 2 admits two more; the third would wait
		// until second 3, past max_wait.
		var late [3]error
		for i := range late {
			wg.Go(func() {
				lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
				if err == nil {
					lease.Release()
				}
				late[i] = err
			})
			synctest.Wait()
		}
		wg.Wait()
		if late[0] != nil || late[1] != nil {
			t.Fatalf("first two late requests: %v, %v, want admitted in second 2", late[0], late[1])
		}
		var refused *gate.RefusedError
		if !errors.As(late[2], &refused) || !errors.Is(late[2], gate.ErrWaitTimeout) {
			t.Fatalf("third late request: %v, want ErrWaitTimeout", late[2])
		}
		if refused.RetryAfter < time.Second {
			t.Errorf("RetryAfter %s, want >= 1s", refused.RetryAfter)
		}
		if at := time.Since(start); at != 2500*time.Millisecond {
			t.Errorf("refused at %s, want 2.5s (queued at 1s, max_wait 1.5s)", at)
		}
	})
}

func TestLimiterMaxQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := testLimiter(t, smallConfig())
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for range 2 { // bulk has no allowance at all: both wait
			wg.Go(func() { _, _ = l.Admit(ctx, Request{Class: classify.Bulk}) })
		}
		synctest.Wait()
		if q := l.Queued(classify.Bulk); q != 2 {
			t.Fatalf("queued %d, want 2", q)
		}
		start := time.Now()
		_, err := l.Admit(ctx, Request{Class: classify.Bulk})
		if !errors.Is(err, gate.ErrQueueFull) || time.Since(start) != 0 {
			t.Fatalf("third bulk request: %v after %s, want ErrQueueFull at once", err, time.Since(start))
		}
		cancel()
		wg.Wait()
	})
}

func TestLimiterDisconnectLeavesQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := testLimiter(t, smallConfig())
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := l.Admit(ctx, Request{Class: classify.Bulk}); errc <- err }()
		synctest.Wait()
		if q := l.Queued(classify.Bulk); q != 1 {
			t.Fatalf("queued %d, want 1", q)
		}
		cancel()
		synctest.Wait()
		if q := l.Queued(classify.Bulk); q != 0 {
			t.Errorf("queued %d after the client left, want 0", q)
		}
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Admit: %v, want context.Canceled", err)
		}
	})
}

func TestLimiterInFlightRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.RequestsPerMinute = 6000
		cfg.Account.MaxInFlight = 2
		l, _ := testLimiter(t, cfg)
		a, errA := l.Admit(t.Context(), Request{Class: classify.Interactive})
		b, errB := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		got := admitLater(t, l, classify.Interactive)
		synctest.Wait()
		if l.Queued(classify.Interactive) != 1 || l.InFlight(classify.Interactive) != 2 {
			t.Fatalf("queued %d in flight %d, want 1 waiting behind 2", l.Queued(classify.Interactive), l.InFlight(classify.Interactive))
		}
		a.Release()
		a.Release() // a second release is a no-op
		c := <-got
		if waited := time.Since(time.Unix(946684800, 0)); waited != 0 {
			t.Errorf("admitted after %s, want at once on release", waited)
		}
		b.Release()
		c.Release()
		time.Sleep(releaseDelay) // in the bubble: advances the fake clock past the release flush
		synctest.Wait()
		if n := l.FleetInFlight(classify.Interactive); n != 0 || l.InFlight(classify.Interactive) != 0 {
			t.Errorf("store in flight %d, limiter %d after all released, want 0", n, l.InFlight(classify.Interactive))
		}
	})
}

func TestLimiterCloseRefusesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(smallConfig(), smallConfig().PerReplica(), store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
		stop := runtest.Start(t, l)
		errc := make(chan error, 1)
		go func() { _, err := l.Admit(t.Context(), Request{Class: classify.Bulk}); errc <- err }()
		synctest.Wait()
		stop()
		if err := <-errc; !errors.Is(err, gate.ErrClosed) {
			t.Errorf("waiter got %v, want ErrClosed", err)
		}
		if _, err := l.Admit(t.Context(), Request{Class: classify.Bulk}); !errors.Is(err, gate.ErrClosed) {
			t.Errorf("Admit after Run: %v, want ErrClosed", err)
		}
	})
}

func TestLimiterHoldsBulkOnUpstreamWord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.RequestsPerMinute = 6000
		cfg.Classes.Interactive.Share, cfg.Classes.Bulk.Share, cfg.Classes.Bulk.Borrow = 0.8, 0.2, true
		cfg.Classes.Bulk.MaxWait = time.Minute
		l, _ := testLimiter(t, cfg)
		start := time.Now()
		l.Observe(start, 2*time.Second, 0) // the upstream says: below the reserve for 2 s
		bulk := make(chan time.Duration, 1)
		go func() {
			lease, err := l.Admit(t.Context(), Request{Class: classify.Bulk})
			if err != nil {
				t.Error(err)
			}
			lease.Release()
			bulk <- time.Since(start)
		}()
		lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if err != nil || time.Since(start) > releaseDelay {
			t.Fatalf("interactive: %v after %s, want admitted at once", err, time.Since(start))
		}
		lease.Release()
		if got := <-bulk; got < 2*time.Second || got > 2*time.Second+releaseDelay {
			t.Errorf("bulk admitted after %s, want when the 2 s hold ends", got)
		}
		if l.UpstreamHold() != 0 {
			t.Errorf("hold %s after it ended", l.UpstreamHold())
		}
	})
}

// TestLimiterReconfigureWakesBlockedWaiters: a waiter blocked by the
// in-flight bound goes at once when a reload raises the bound, without
// waiting for a release.
func TestLimiterReconfigureWakesBlockedWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig()
		cfg.Account.RequestsPerMinute = 6000
		cfg.Account.MaxInFlight = 1
		l, _ := testLimiter(t, cfg)
		a, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release()
		got := admitLater(t, l, classify.Interactive)
		synctest.Wait()
		start := time.Now()
		cfg.Account.MaxInFlight = 2
		l.Reconfigure(cfg, cfg.PerReplica())
		b := <-got
		if waited := time.Since(start); waited != 0 {
			t.Errorf("admitted %s after the bound was raised, want at once", waited)
		}
		b.Release()
	})
}
