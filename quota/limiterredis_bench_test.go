package quota

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// BenchmarkRedisRoundTrips admits and releases requests from many
// goroutines through one limiter over the Redis store and reports Redis
// script calls per admitted request (from INFO commandstats): below 1, and
// falling as concurrency grows, because one call serves a whole batch.
func BenchmarkRedisRoundTrips(b *testing.B) {
	srv := redistest.Start(b)
	for _, callers := range []int{4, 16, 64, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Account.RequestsPerMinute = 600_000_000 // never the limit: this measures batching
			cfg.Account.MaxInFlight = 100_000
			s := store.NewRedis(srv.Client(b), store.Config{KeyPrefix: redistest.Prefix(b), Timeout: time.Second, Heartbeat: time.Second})
			l := newLimiter(cfg, cfg.Limits(), s, time.Second, slog.New(slog.DiscardHandler))
			stop := runtest.Start(b, l)
			before := scriptCalls(srv.CommandStats(b))
			b.ReportAllocs()
			b.ResetTimer()
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			for i := range callers {
				class := classify.Classes[i%2]
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						lease, err := l.Admit(b.Context(), Request{Class: class})
						if err != nil {
							b.Error(err)
							return
						}
						lease.Release()
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			calls := scriptCalls(srv.CommandStats(b)) - before
			stop()
			b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/admit")
		})
	}
}

func scriptCalls(stats map[string]int64) int64 { return stats["evalsha"] + stats["eval"] }
