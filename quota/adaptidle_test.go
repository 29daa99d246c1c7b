package quota

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
)

// countingAdapt is an AdaptStore that counts its adds.
type countingAdapt struct {
	store.AdaptStore
	adds atomic.Int64
}

func (c *countingAdapt) Add(ctx context.Context, pool string, n store.AdaptCounts) (store.AdaptAnswer, error) {
	c.adds.Add(1)
	return c.AdaptStore.Add(ctx, pool, n)
}

// TestAdaptiveRunIdleWithoutABound (issue 38 item 3): a pool without
// adaptive_in_flight does not wake every store.AdaptInterval — its run
// drops what its leases measured once a minute — and a reload that turns
// its bound on wakes it at once: the store hears from it within an
// AdaptInterval, not a minute later. Before, every pool's run ticked
// every 2 s whether or not it had a bound: 25 wake-ups a second on an
// idle replica of 50 pools.
func TestAdaptiveRunIdleWithoutABound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		l := newLimiter(cfg, cfg.Enforced(), store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
		adds := &countingAdapt{AdaptStore: store.NewMemoryAdapt(time.Now)}
		l.adapt.store = adds
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go l.adapt.run(ctx)

		l.leases.adapt.completed.Add(5)
		time.Sleep(10 * store.AdaptInterval) // synctest's clock: no real wait
		synctest.Wait()
		if n := l.leases.adapt.completed.Load(); n != 5 {
			t.Fatalf("after %v without a bound, %d completions left in the ledger, want the 5 (no tick yet)", 10*store.AdaptInterval, n)
		}
		time.Sleep(adaptIdleInterval)
		synctest.Wait()
		if n := l.leases.adapt.completed.Load(); n != 0 {
			t.Fatalf("after %v without a bound, %d completions left in the ledger, want them dropped", adaptIdleInterval, n)
		}

		on := adaptiveConfig()
		l.Reconfigure(on, on.Enforced())
		synctest.Wait()
		time.Sleep(store.AdaptInterval)
		synctest.Wait()
		if n := adds.adds.Load(); n != 1 {
			t.Fatalf("%d adds to the store an AdaptInterval after the reload turned the bound on, want 1", n)
		}
	})
}
