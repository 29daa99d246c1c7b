package quota

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// countedLimiter starts a limiter over st with heartbeat, counting its
// store calls.
func countedLimiter(t *testing.T, st store.Store, heartbeat time.Duration) (*limiter, *atomic.Int64) {
	t.Helper()
	cfg := testConfig()
	l := newLimiter(cfg, cfg.Limits(), st, heartbeat, slog.New(slog.DiscardHandler))
	calls := new(atomic.Int64)
	l.OnStoreCall(func(time.Duration, error) { calls.Add(1) })
	runtest.Start(t, l)
	return l, calls
}

// TestHeartbeatFollowsWhatThePoolHolds: a pool calls its store once a
// heartbeat while it holds a slot, and not at all while it holds nothing
// (issue 38: an idle replica's calls grew with its pools, one a second
// each). On the bubble's clock: ten heartbeats idle from the start bring
// one call (the replica's first, which tells the fleet of it), ten with a
// slot held bring ten, and ten after its release bring only the call that
// carries the release.
func TestHeartbeatFollowsWhatThePoolHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const heartbeat = time.Second
		l, calls := countedLimiter(t, store.NewMemory(nil), heartbeat)
		over := func(what string, want int64) {
			t.Helper()
			before := calls.Load()
			time.Sleep(10 * heartbeat) // the bubble's clock
			synctest.Wait()
			if got := calls.Load() - before; got != want {
				t.Errorf("%s: %d store calls in ten heartbeats, want %d", what, got, want)
			}
		}
		over("idle from the start", 1)
		lease, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		over("holding a slot", 10)
		lease.Release()
		over("after the release", 1)
	})
}

// TestHeartbeatWhileOthersHold: over real Redis, a replica that holds
// nothing keeps calling once a heartbeat while another replica holds a
// slot (so a dead replica's slots are reaped by the survivors' calls),
// and falls silent once its last answer shows the fleet holding nothing.
func TestHeartbeatWhileOthersHold(t *testing.T) {
	const heartbeat = 100 * time.Millisecond
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	newStore := func() store.Store {
		return store.NewRedis(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second, Heartbeat: heartbeat})
	}
	holder, _ := countedLimiter(t, newStore(), heartbeat)
	idle, calls := countedLimiter(t, newStore(), heartbeat)
	lease, err := holder.Admit(t.Context(), Request{Class: classify.Interactive})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the idle replica to hear of the other's slot", func() bool {
		return idle.FleetInFlight(classify.Interactive) == 1
	})
	n := calls.Load()
	waitUntil(t, "the idle replica's three heartbeats while the other holds a slot", func() bool {
		return calls.Load() >= n+3
	})
	lease.Release()
	waitUntil(t, "the idle replica to hear of the release", func() bool {
		return idle.FleetInFlight(classify.Interactive) == 0
	})
	n = calls.Load()
	<-time.After(10 * heartbeat) // a span to call in, not a synchronisation
	if got := calls.Load() - n; got != 0 {
		t.Errorf("the idle replica made %d store calls in ten heartbeats with the fleet holding nothing, want 0", got)
	}
}
