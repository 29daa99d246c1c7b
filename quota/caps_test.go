package quota

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// replica is one pool's limiter behind the callers' caps gate over a
// backend, running until the test ends.
type replica struct {
	cfg  Config
	gate *gate.CapGate
	lim  *limiter
}

func startReplica(t *testing.T, b *backend, cfg Config, caps map[string]gate.Cap) *replica {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	r := &replica{cfg: cfg, gate: gate.NewCapGate(b.Caps, b.Heartbeat, log), lim: newLimiter(cfg, cfg.Enforced(), b.Store, b.Heartbeat, log)}
	r.gate.Reconfigure(cfg.Classes.gates(), cfg.Account.ExpectedReplicas, caps)
	runtest.Start(t, r.lim)
	runtest.Start(t, r.gate)
	return r
}

// admit admits an interactive request of caller.
func (r *replica) admit(ctx context.Context, caller string) (*Lease, error) {
	return admitThrough(ctx, r.gate, []route{{l: r.lim}}, Request{Class: classify.Interactive, Caller: caller}, r.cfg.Classes.Interactive.MaxWait)
}

// cap is caller's cap state; ok is false when it has none.
func (r *replica) cap(caller string) (gate.CapState, bool) {
	st, ok := r.gate.States()[caller]
	return st, ok
}

// setCaps reconfigures the replica's caps.
func (r *replica) setCaps(caps map[string]gate.Cap) {
	r.gate.Reconfigure(r.cfg.Classes.gates(), r.cfg.Account.ExpectedReplicas, caps)
}

// capSec is the window second of caller's last grant under its cap.
func (r *replica) capSec(caller string) int64 {
	return r.gate.LastSecond(caller)
}

// runaway is the capped caller of the caps' tests.
const runaway = "runaway"

// capConfig: one class (interactive), plenty of account, a short max_wait.
func capConfig() Config {
	cfg := testConfig()
	cfg.Classes.Interactive.MaxWait = 300 * time.Millisecond
	return cfg
}

// admitAsync starts an Admit and returns where its result arrives.
func admitAsync(ctx context.Context, r *replica, caller string) <-chan admitResult {
	out := make(chan admitResult, 1)
	go func() {
		l, err := r.admit(ctx, caller)
		out <- admitResult{l, err}
	}()
	return out
}

type admitResult struct {
	lease *Lease
	err   error
}

// runCapsSuite is the caps' behaviour over any backend.
func runCapsSuite(t *testing.T, newBackend func(t *testing.T, cfg Config) *backend) {
	// holdingCap starts a replica whose runaway caller may have one request
	// in flight, within a 10 s max_wait, and takes that one.
	holdingCap := func(t *testing.T) (*replica, Config, *Lease) {
		t.Helper()
		cfg := capConfig()
		cfg.Classes.Interactive.MaxWait = 10 * time.Second
		r := startReplica(t, newBackend(t, cfg), cfg, map[string]gate.Cap{runaway: {MaxInFlight: 1}})
		first, err := r.admit(t.Context(), runaway)
		if err != nil {
			t.Fatal(err)
		}
		return r, cfg, first
	}
	t.Run("a capped caller waits behind its own cap, not in the class's line", func(t *testing.T) {
		r, _, first := holdingCap(t)
		second := admitAsync(t.Context(), r, runaway)
		waitUntil(t, "the runaway's second request to wait on its cap", func() bool { return capOf(r, runaway).Queued == 1 })
		// Another caller of the same class goes at once.
		other, err := r.admit(t.Context(), "other")
		if err != nil {
			t.Fatalf("an uncapped caller behind a capped one: %v", err)
		}
		if other.Held() {
			t.Error("the uncapped caller was held")
		}
		other.Release()
		first.Release()
		res := <-second
		if res.err != nil {
			t.Fatalf("the runaway's second request after the first ended: %v", res.err)
		}
		if !res.lease.Held() {
			t.Error("the second request waited on the cap but is not reported held")
		}
		if by := res.lease.Wait().HeldBy; by != gate.HeldByCap {
			t.Errorf("the second request's Wait().HeldBy = %q, want %q", by, gate.HeldByCap)
		}
		if st := capOf(r, runaway); st.InFlight != 1 || st.MaxInFlight != 1 {
			t.Errorf("cap state %+v, want 1 in flight of 1", st)
		}
		res.lease.Release()
		waitUntil(t, "the cap's slot to come back", func() bool { return capOf(r, runaway).InFlight == 0 })
		if n := r.lim.InFlight(classify.Interactive); n != 0 {
			t.Errorf("class in flight %d after every release", n)
		}
	})
	t.Run("a cap refusal names the caller", func(t *testing.T) {
		cfg := capConfig()
		r := startReplica(t, newBackend(t, cfg), cfg, map[string]gate.Cap{runaway: {MaxInFlight: 1}})
		held, err := r.admit(t.Context(), runaway)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		_, err = r.admit(t.Context(), runaway)
		refused, ok := errors.AsType[*gate.RefusedError](err)
		if !ok || refused.Caller != runaway || !errors.Is(err, gate.ErrWaitTimeout) {
			t.Fatalf("Admit over the cap = %v, want a max_wait refusal naming %q", err, runaway)
		}
	})
	t.Run("a class refusal after the cap gives the cap's slot back", func(t *testing.T) {
		cfg := capConfig()
		cfg.Account.MaxInFlight = 1
		r := startReplica(t, newBackend(t, cfg), cfg, map[string]gate.Cap{runaway: {MaxInFlight: 5}})
		blocker, err := r.admit(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Release()
		_, err = r.admit(t.Context(), runaway)
		refused, ok := errors.AsType[*gate.RefusedError](err)
		if !ok || refused.Caller != "" || !errors.Is(err, gate.ErrWaitTimeout) {
			t.Fatalf("Admit with the class full = %v, want the class's max_wait refusal", err)
		}
		waitUntil(t, "the cap's slot to come back", func() bool { return capOf(r, runaway).InFlight == 0 })
	})
	t.Run("requests_per_minute spaces the caller's admissions", func(t *testing.T) {
		cfg := capConfig()
		cfg.Classes.Interactive.MaxWait = 5 * time.Second
		r := startReplica(t, newBackend(t, cfg), cfg, map[string]gate.Cap{runaway: {RequestsPerMinute: 60}})
		var secs []int64
		for range 3 {
			l, err := r.admit(t.Context(), runaway)
			if err != nil {
				t.Fatal(err)
			}
			secs = append(secs, r.capSec(runaway))
			l.Release()
		}
		if secs[0] == secs[1] || secs[1] == secs[2] {
			t.Errorf("admitted in windows %v; at 60 a minute each needs a second of its own", secs)
		}
	})
	t.Run("lifting a cap lets its waiters go", func(t *testing.T) {
		r, _, first := holdingCap(t)
		defer first.Release()
		second := admitAsync(t.Context(), r, runaway)
		waitUntil(t, "the second request to wait on the cap", func() bool { return capOf(r, runaway).Queued == 1 })
		r.setCaps(nil)
		res := <-second
		if res.err != nil {
			t.Fatalf("waiter after the cap was lifted: %v", res.err)
		}
		res.lease.Release()
		if _, ok := r.cap(runaway); ok {
			t.Error("a lifted cap is still reported")
		}
	})
}

// capOf is caller's cap state, for tests.
func capOf(r *replica, caller string) gate.CapState {
	st, _ := r.cap(caller)
	return st
}

func TestCapsInProcess(t *testing.T) {
	runCapsSuite(t, func(t *testing.T, cfg Config) *backend {
		b, err := openBackend(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// redisBackend opens a backend on srv under prefix, with a generous
// timeout (the race detector slows calls).
func redisBackend(t *testing.T, srv *redistest.Server, prefix string, cfg Config) *backend {
	t.Helper()
	cfg.Store.RedisURL, cfg.Store.KeyPrefix, cfg.Store.Timeout = srv.URL(), prefix, 2*time.Second
	b, err := openBackend(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestCapsOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	runCapsSuite(t, func(t *testing.T, cfg Config) *backend { return redisBackend(t, srv, redistest.Prefix(t), cfg) })
}

// TestCapIsFleetWide: two replicas on one Redis share a caller's cap of 2:
// while one replica holds both slots, the other's request waits, and goes
// when a slot is released over there.
func TestCapIsFleetWide(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	cfg := capConfig()
	cfg.Classes.Interactive.MaxWait = 10 * time.Second
	caps := map[string]gate.Cap{runaway: {MaxInFlight: 2}}
	a := startReplica(t, redisBackend(t, srv, prefix, cfg), cfg, caps)
	b := startReplica(t, redisBackend(t, srv, prefix, cfg), cfg, caps)
	var leases []*Lease
	for range 2 {
		l, err := a.admit(t.Context(), runaway)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	waiting := admitAsync(t.Context(), b, runaway)
	waitUntil(t, "replica b to see the cap full", func() bool {
		st := capOf(b, runaway)
		return st.Queued == 1 && st.FleetInFlight == 2
	})
	select {
	case res := <-waiting:
		t.Fatalf("replica b admitted past the fleet-wide cap: %v", res.err)
	default:
	}
	leases[0].Release()
	res := <-waiting
	if res.err != nil {
		t.Fatalf("replica b after a slot came back: %v", res.err)
	}
	res.lease.Release()
	leases[1].Release()
}

// TestCapsLiftedAreDropped: a lifted cap lets its request go, keeps its
// count while the request is in flight, and is dropped once the store has
// heard that request end: the caps map does not only grow, and no cap
// has a limiter, goroutine or store of its own.
func TestCapsLiftedAreDropped(t *testing.T) {
	srv := redistest.Start(t)
	cfg := capConfig()
	b := redisBackend(t, srv, redistest.Prefix(t), cfg)
	r := startReplica(t, b, cfg, map[string]gate.Cap{runaway: {MaxInFlight: 1}})
	ctx := t.Context()
	lease, err := r.admit(ctx, runaway)
	if err != nil {
		t.Fatal(err)
	}
	held := r.gate.LineCount
	r.setCaps(nil) // lifted
	r.setCaps(nil)
	if n := held(); n != 1 {
		t.Fatalf("with a request in flight: %d caps kept; want the lifted cap's", n)
	}
	lease.Release()
	waitUntil(t, "the lifted cap to be dropped once the store heard its request end", func() bool { return held() == 0 })
	// Capped again, it starts afresh.
	r.setCaps(map[string]gate.Cap{runaway: {MaxInFlight: 1}})
	lease, err = r.admit(ctx, runaway)
	if err != nil {
		t.Fatalf("capped again: %v", err)
	}
	lease.Release()
}
