package quota

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/prometheus/client_golang/prometheus"
)

// TestAdmitterPools: each account.models pool admits on its own windows,
// a model resolves to the first pool that matches, and a reload adds a
// pool that serves at once and removes one whose waiters are refused with
// ErrPoolRemoved.
func TestAdmitterPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := smallConfig() // the account: 2 interactive a second
		cfg.Account.Models = []ModelPool{{Name: "gpt-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 60, MaxInFlight: 10}}
		a, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		if got := a.PoolFor("gpt-4o-mini"); got != "gpt-4o" {
			t.Fatalf("PoolFor(gpt-4o-mini) = %q", got)
		}
		if got := a.PoolFor("claude"); got != accountPool {
			t.Fatalf("PoolFor(claude) = %q, want the account", got)
		}
		admit := func(pool string) (*Lease, error) {
			return a.Admit(t.Context(), Request{Pool: pool, Class: classify.Interactive})
		}
		// The account's window (2) and the pool's (1) are apart.
		for _, pool := range []string{accountPool, accountPool, "gpt-4o"} {
			if _, err := admit(pool); err != nil {
				t.Fatalf("admit %q: %v", pool, err)
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
		next.Account.Models = []ModelPool{{Name: "mini", Match: []string{"gpt-4o-mini*"}, RequestsPerMinute: 60, MaxInFlight: 10}}
		a.Reconfigure(next, nil)
		if err := <-errc; !errors.Is(err, ErrPoolRemoved) {
			t.Fatalf("the removed pool's waiter got %v, want ErrPoolRemoved", err)
		}
		if got, got2 := a.PoolFor("gpt-4o-mini"), a.PoolFor("gpt-4o"); got != "mini" || got2 != accountPool {
			t.Fatalf("after the reload: gpt-4o-mini → %q, gpt-4o → %q; want mini and the account", got, got2)
		}
		if _, err := admit("mini"); err != nil {
			t.Fatalf("the new pool: %v", err)
		}
		if st := a.State(); len(st.Pools) != 2 || st.Pools["mini"].InFlight["interactive"] != 1 || st.Pools[DefaultPool].InFlight["interactive"] != 2 {
			t.Fatalf("state pools %+v; want default with 2 in flight and mini with 1", st.Pools)
		}
	})
}
