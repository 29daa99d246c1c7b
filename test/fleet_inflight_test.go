package test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestFleetInFlightReadsRequests: far from every limit a replica takes
// grants ahead of demand (credits), which the store counts in flight until
// they are used; meterproxy_fleet_in_flight leaves them out, so on one
// replica it reads what the replica itself has upstream, not the
// reservations on top (before, it read the credits too: the real
// Prometheus saw 7–8 for 3 in flight).
func TestFleetInFlightReadsRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("4 s load run; skipped with -short")
	}
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: 20 * time.Millisecond}))
	cfg := fleetConfig(up.URL, redistest.Start(t), redistest.Prefix(t))
	cfg.set("store.timeout", "1s")
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("account.max_in_flight", 1000)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	client := newClient(t, 16)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				fairSend(ctx, client, p.URL, chatKey)
			}
		})
	}
	time.Sleep(time.Second) // credits flow
	var over, own float64
	n := 0
	for range 20 {
		m := scrape(t, p.AdminURL)
		over += sum(m, "meterproxy_fleet_in_flight", nil) - sum(m, "meterproxy_in_flight", nil)
		own += sum(m, "meterproxy_in_flight", nil)
		n++
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	t.Logf("one replica, %d readings: in flight %.1f on average; fleet in flight above it by %.2f", n, own/float64(n), over/float64(n))
	if avg := over / float64(n); avg > 2 {
		t.Errorf("meterproxy_fleet_in_flight read %.2f above the replica's own in flight on average: it counts reservations", avg)
	}
}
