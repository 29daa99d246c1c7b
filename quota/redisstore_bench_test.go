package quota

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/redistest"
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
			s := newRedisStore(srv.Client(b), StoreConfig{KeyPrefix: redistest.Prefix(b), Timeout: time.Second, Heartbeat: time.Second})
			l := newLimiter(cfg, cfg.Limits(), s, time.Second, slog.New(slog.DiscardHandler))
			stop := startRun(b, l)
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

// BenchmarkRedisTake is one take.lua call as a busy replica makes it:
// tokens enforced, a batch of listed waiters in each class, fair split on,
// credits and corrections to record. It measures the script and its
// encoding, not batching.
func BenchmarkRedisTake(b *testing.B) {
	srv := redistest.Start(b)
	s := newRedisStore(srv.Client(b), StoreConfig{KeyPrefix: redistest.Prefix(b), Timeout: time.Second, Heartbeat: time.Second})
	lim := Limits{AccountRPM: 600_000_000, BulkRPM: 300_000_000, ReserveRPM: 60_000_000, InFlight: 1 << 30, BulkInFlight: 1 << 29,
		ReserveInFlight: 1 << 20, Borrow: true, AccountTPM: 1 << 40, BulkTPM: 1 << 39, ReserveTPM: 1 << 30, OutputTPM: 1 << 29,
		Fair: [classify.NumClasses]bool{true, true}}
	const batch = 16
	req := takeRequest{Want: pc(batch, batch), InFlight: pc(100, 100), Credits: pc(3, 3), Corrections: pc(-50, 70),
		Output: 1000, Limits: lim, Upstream: &upstreamReport{Age: time.Millisecond}}
	for c := range req.Waiters {
		req.Waiters[c] = make([]queued, batch)
		for i := range req.Waiters[c] {
			req.Waiters[c][i].Cost = 1000 + int64(i)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Take(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}
