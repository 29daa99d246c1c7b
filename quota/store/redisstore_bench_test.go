package store

import (
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// BenchmarkRedisTake is one take.lua call as a busy replica makes it:
// tokens enforced, a batch of listed waiters in each class, fair split on,
// credits and corrections to record. It measures the script and its
// encoding, not batching.
func BenchmarkRedisTake(b *testing.B) {
	srv := redistest.Start(b)
	s := NewRedis(srv.Client(b), Config{KeyPrefix: redistest.Prefix(b), Timeout: time.Second, Heartbeat: time.Second})
	lim := Limits{AccountRPM: 600_000_000, BulkRPM: 300_000_000, ReserveRPM: 60_000_000, InFlight: 1 << 30, BulkInFlight: 1 << 29,
		ReserveInFlight: 1 << 20, Borrow: true, AccountTPM: 1 << 40, BulkTPM: 1 << 39, ReserveTPM: 1 << 30, OutputLimits: OutputLimits{OutputTPM: 1 << 29},
		Fair: [classify.NumClasses]bool{true, true}}
	const batch = 16
	req := TakeRequest{Want: pc(batch, batch), InFlight: pc(100, 100), Credits: pc(3, 3), Corrections: pc(-50, 70),
		Output: 1000, Limits: lim, Upstream: &UpstreamReport{Age: time.Millisecond}}
	for c := range req.Waiters {
		req.Waiters[c] = make([]Queued, batch)
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
