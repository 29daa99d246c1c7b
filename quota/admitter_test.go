package quota

import (
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/runtest"
)

// runAdmitter builds the Admitter of cfg and callers over the store cfg
// names, runs it until the test ends, and then closes it.
func runAdmitter(t *testing.T, cfg Config, callers []classify.Caller) *Admitter {
	t.Helper()
	return runAdmitterOn(t, cfg, callers, prometheus.NewRegistry())
}

// runAdmitterOn is runAdmitter with the Admitter's metrics on reg.
func runAdmitterOn(t *testing.T, cfg Config, callers []classify.Caller, reg *prometheus.Registry) *Admitter {
	t.Helper()
	a, err := New(cfg, Deps{Callers: callers, Log: slog.New(slog.DiscardHandler), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	runtest.Start(t, a) // stopped before Close: cleanups run last first
	return a
}

// model is a request's model, for PoolFor.
func model(m string) func() Model { return func() Model { return Model{Name: m} } }

// TestAdmitterPools: each account.models pool admits on its own windows,
// a model resolves to the first pool that matches, and a reload adds a
// pool that serves at once and removes one whose waiters are refused with
// ErrPoolRemoved.
func TestAdmitterPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig() // the account: 2 interactive a second
		cfg.Account.Models = []modelPool{{Name: "gpt-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 60, MaxInFlight: 10}}
		a := runAdmitter(t, cfg, nil)
		if got := a.PoolFor(model("gpt-4o-mini")); got != "gpt-4o" {
			t.Fatalf("PoolFor(gpt-4o-mini) = %q", got)
		}
		if got := a.PoolFor(model("claude")); got != store.AccountPool {
			t.Fatalf("PoolFor(claude) = %q, want the account", got)
		}
		admit := func(model string) (*Lease, error) { // quota picks its pool
			return a.Admit(t.Context(), Request{Model: Model{Name: model}, Class: classify.Interactive})
		}
		// The account's window (2) and the pool's (1) are apart.
		for _, model := range []string{"claude", "claude", "gpt-4o"} {
			if _, err := admit(model); err != nil {
				t.Fatalf("admit %q: %v", model, err)
			}
		}
		errc := make(chan error, 2)
		for range 2 {
			go func() { _, err := admit("gpt-4o"); errc <- err }()
		}
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("the pool's second request of the second was answered: %v", err)
		default:
		}
		time.Sleep(time.Second) // the pool's next window: one of the two goes
		if err := <-errc; err != nil {
			t.Fatalf("the pool's next window: %v", err)
		}
		// A reload removes gpt-4o and adds mini.
		next := smallConfig()
		next.Account.Models = []modelPool{{Name: "mini", Match: []string{"gpt-4o-mini*"}, RequestsPerMinute: 60, MaxInFlight: 10}}
		a.Reconfigure(next, nil)
		if err := <-errc; !errors.Is(err, ErrPoolRemoved) {
			t.Fatalf("the removed pool's waiter got %v, want ErrPoolRemoved", err)
		}
		if got, got2 := a.PoolFor(model("gpt-4o-mini")), a.PoolFor(model("gpt-4o")); got != "mini" || got2 != store.AccountPool {
			t.Fatalf("after the reload: gpt-4o-mini → %q, gpt-4o → %q; want mini and the account", got, got2)
		}
		if _, err := admit("gpt-4o-mini"); err != nil {
			t.Fatalf("the new pool: %v", err)
		}
		if st := a.State(); len(st.Pools) != 2 || st.Pools["mini"].InFlight["interactive"] != 1 || st.Pools[DefaultPool].InFlight["interactive"] != 2 {
			t.Fatalf("state pools %+v; want default with 2 in flight and mini with 1", st.Pools)
		}
	})
}

// TestCapsAcrossPools: with account.models set, a caller's cap is one
// across pools (the caps gate): capped at 2 in flight, it holds 2 in all
// pools together, its third request waits until one ends, whichever pool
// it is for; an uncapped caller is not gated at all. Without models, the
// same gate decides caps.
func TestCapsAcrossPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Account.Models = []modelPool{{Name: "gpt-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 6000, MaxInFlight: 100}}
		callers := []classify.Caller{{Name: "capped", Class: classify.Bulk, MaxInFlight: 2}, {Name: "free", Class: classify.Bulk}}
		a := runAdmitter(t, cfg, callers)
		admit := func(model, caller string) (*Lease, error) { // "" draws on the account
			return a.Admit(t.Context(), Request{Model: Model{Name: model}, Class: classify.Bulk, Caller: caller})
		}
		first, err := admit(store.AccountPool, "capped")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admit("gpt-4o", "capped"); err != nil {
			t.Fatal(err)
		}
		third := make(chan error, 1)
		go func() {
			l, err := admit("gpt-4o", "capped")
			if err == nil && !l.Held() {
				err = errors.New("admitted without waiting")
			}
			third <- err
		}()
		synctest.Wait()
		select {
		case err := <-third:
			t.Fatalf("a third request of a caller capped at 2, in the other pool, was answered: %v", err)
		default:
		}
		for range 5 {
			if _, err := admit("gpt-4o", "free"); err != nil {
				t.Fatalf("an uncapped caller: %v", err)
			}
		}
		if got := a.State().Caps["capped"].FleetInFlight; got != 2 {
			t.Fatalf("the cap's count %d, want 2 (one in each pool)", got)
		}
		first.Release() // the account's: the third, for gpt-4o, goes
		if err := <-third; err != nil {
			t.Fatalf("the third request once one ended: %v", err)
		}
		// A reload without models: the same gate decides caps.
		next := DefaultConfig()
		a.Reconfigure(next, callers)
		if got := a.State().Caps["capped"]; got.MaxInFlight != 2 || got.InFlight != 2 {
			t.Fatalf("the cap after a reload without models: %+v, want 2 of 2 in flight", got)
		}
		// Without pools a request's model is never looked for.
		if got := a.PoolFor(func() Model { t.Error("looked for the model with no pools to match"); return Model{Name: "gpt-4o"} }); got != store.AccountPool {
			t.Fatalf("PoolFor without pools = %q, want the account", got)
		}
	})
}

// TestCapHoldsAcrossReloadAddingPools: a caller capped at 1 holds its
// slot across a reload that adds the first account.models pool (and one
// that removes the last): a second request waits for it and is refused
// at max_wait, naming the caller, instead of being admitted over the cap
// under a count that never saw the first.
func TestCapHoldsAcrossReloadAddingPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Classes.Bulk.MaxWait = time.Second
		callers := []classify.Caller{{Name: "capped", Class: classify.Bulk, MaxInFlight: 1}}
		a := runAdmitter(t, cfg, callers)
		first, err := a.Admit(t.Context(), Request{Class: classify.Bulk, Caller: "capped"})
		if err != nil {
			t.Fatal(err)
		}
		withPools := cfg
		withPools.Account.Models = []modelPool{{Name: "gpt-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 6000, MaxInFlight: 100}}
		for _, next := range []Config{withPools, cfg} {
			a.Reconfigure(next, callers)
			for _, pool := range []string{store.AccountPool, "gpt-4o"} {
				_, err := a.Admit(t.Context(), Request{Model: Model{Name: pool}, Class: classify.Bulk, Caller: "capped"})
				if r, ok := errors.AsType[*gate.RefusedError](err); !ok || r.Caller != "capped" || !errors.Is(err, gate.ErrWaitTimeout) {
					t.Fatalf("pools %d, %q: a second request of a caller capped at 1 got %v; want a max_wait refusal naming it", len(next.Account.Models), pool, err)
				}
			}
		}
		first.Release()
	})
}
