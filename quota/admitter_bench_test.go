package quota

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// BenchmarkAdmitInProcess admits and releases requests through the
// Admitter in process, far from every limit, from parallel goroutines:
// an uncapped caller, and one capped far above the load, so the cost of
// the caller's gate shows beside the pool's.
func BenchmarkAdmitInProcess(b *testing.B) {
	for _, caller := range []string{"free", "capped"} {
		b.Run(caller, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Account.RequestsPerMinute = 600_000_000
			cfg.Account.MaxInFlight = 100_000
			callers := []classify.Caller{{Name: "capped", Class: classify.Bulk, MaxInFlight: 100_000}}
			a, err := New(cfg, Deps{Callers: callers, Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			runtest.Start(b, a)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := a.Admit(b.Context(), Request{Class: classify.Bulk, Caller: caller})
					if err != nil {
						b.Error(err)
						return
					}
					l.Release()
				}
			})
		})
	}
}
