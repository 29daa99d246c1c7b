package gate

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// runaway is the capped caller of the gate's tests.
const runaway = "runaway"

// runGate runs a CapGate over counter with caps, one request a class
// may queue, until the test ends.
func runGate(t *testing.T, counter CapCounter, caps map[string]Cap) *CapGate {
	t.Helper()
	g := NewCapGate(counter, time.Second, slog.New(slog.DiscardHandler))
	// capConfig's classes (testConfig's), one interactive request queued.
	g.Reconfigure(Classes{MaxQueue: [classify.NumClasses]int{1, 2}}, 1, caps)
	runtest.Start(t, g)
	return g
}

// runGateSuite: an uncapped caller passes at once holding nothing; a
// capped one takes a slot, waits (held) while its cap is full, goes
// when a slot comes back, and is refused, naming the caller, when its
// line is full or its wait ends.
func runGateSuite(t *testing.T, newCounter func(t *testing.T) CapCounter) {
	g := runGate(t, newCounter(t), map[string]Cap{runaway: {MaxInFlight: 1}})
	ctx := t.Context()
	start := func(caller string, wait time.Duration) (Pass, error) {
		return g.Start(ctx, Request{Caller: caller, Class: classify.Interactive}, time.Now().Add(wait))
	}
	if p, err := start("other", 0); err != nil || p.OnRelease != nil || p.Held {
		t.Fatalf("an uncapped caller: %+v, %v; want a pass holding nothing", p, err)
	}
	first, err := start(runaway, time.Second)
	if err != nil || first.Held {
		t.Fatalf("the first capped request: %+v, %v", first, err)
	}
	second := make(chan error, 1)
	var secondPass Pass
	go func() {
		var err error
		secondPass, err = start(runaway, 10*time.Second)
		second <- err
	}()
	// Held once an answer of the counter left it waiting: before that,
	// a slot given back would admit it as if it had never waited.
	poll.Until(t, "the second request to be held at the cap", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		w := g.lines[runaway].waiting[classify.Interactive]
		return len(w) == 1 && w[0].held
	})
	_, err = start(runaway, time.Second)
	if r, ok := errors.AsType[*RefusedError](err); !ok || r.Caller != runaway || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a third with the line full: %v, want ErrQueueFull naming %q", err, runaway)
	}
	first.Release()
	first.Release() // a second release does nothing
	if err := <-second; err != nil {
		t.Fatalf("the second once the first ended: %v", err)
	}
	if !secondPass.Held {
		t.Error("the second waited at the cap but is not held")
	}
	if st := g.States()[runaway]; st.InFlight != 1 || st.FleetInFlight != 1 {
		t.Fatalf("cap state %+v, want 1 in flight", st)
	}
	_, err = start(runaway, 50*time.Millisecond)
	if r, ok := errors.AsType[*RefusedError](err); !ok || r.Caller != runaway || !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("over the cap: %v, want ErrWaitTimeout naming %q", err, runaway)
	}
	secondPass.Release()
	poll.Until(t, "the counter to hear the last slot come back", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		ln := g.lines[runaway]
		return ln.inFlight == 0 && ln.reported == 0
	})
}

func TestCapGateInProcess(t *testing.T) {
	runGateSuite(t, func(*testing.T) CapCounter { return NewMemoryCapCounter(nil) })
}

func TestCapGateOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	runGateSuite(t, func(t *testing.T) CapCounter { return newTestCapCounter(t, srv, redistest.Prefix(t)) })
}

// TestGateChain: a request passes every gate of the chain in order; a
// refusal by a later gate gives back what the earlier ones granted, and
// the chain's pass releases every gate's.
func TestGateChain(t *testing.T) {
	loose := runGate(t, NewMemoryCapCounter(nil), map[string]Cap{runaway: {MaxInFlight: 5}})
	tight := runGate(t, NewMemoryCapCounter(nil), map[string]Cap{runaway: {MaxInFlight: 1}})
	ch := Chain{loose, tight}
	start := func(wait time.Duration) (Pass, error) {
		return ch.Start(t.Context(), Request{Caller: runaway, Class: classify.Interactive}, time.Now().Add(wait))
	}
	first, err := start(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start(20 * time.Millisecond); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("over the tight gate: %v, want ErrWaitTimeout", err)
	}
	poll.Until(t, "the loose gate's slot to come back", func() bool { return loose.States()[runaway].InFlight == 1 })
	first.Release()
	poll.Until(t, "both gates' slots to come back", func() bool {
		return loose.States()[runaway].InFlight == 0 && tight.States()[runaway].InFlight == 0
	})
}

// TestCapGateNeverOverCap: many requests of one caller, arriving,
// giving up and ending at once, never hold more than its cap between
// them — the in-process gate's at-once path and its loop both grant.
func TestCapGateNeverOverCap(t *testing.T) {
	for _, tt := range []struct {
		name    string
		counter func(t *testing.T) CapCounter
	}{
		{"in-process", func(*testing.T) CapCounter { return NewMemoryCapCounter(nil) }},
		{"redis", func(t *testing.T) CapCounter {
			return newTestCapCounter(t, redistest.Start(t), redistest.Prefix(t))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const capOf = 2
			g := runGate(t, tt.counter(t), map[string]Cap{runaway: {MaxInFlight: capOf}})
			g.Reconfigure(Classes{MaxQueue: [classify.NumClasses]int{1000, 0}}, 0, map[string]Cap{runaway: {MaxInFlight: capOf}})
			var held atomic.Int64
			var peakMu sync.Mutex
			var peak int64
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					for j := range 20 {
						wait := time.Second
						if (i+j)%5 == 0 {
							wait = time.Millisecond // some give up, racing their grant
						}
						p, err := g.Start(t.Context(), Request{Caller: runaway, Class: classify.Interactive}, time.Now().Add(wait))
						if err != nil {
							continue
						}
						n := held.Add(1)
						peakMu.Lock()
						peak = max(peak, n)
						peakMu.Unlock()
						held.Add(-1)
						p.Release()
					}
				})
			}
			wg.Wait()
			if got := peak; got > capOf || got == 0 {
				t.Fatalf("peak %d held at once, cap %d", got, capOf)
			}
		})
	}
}
