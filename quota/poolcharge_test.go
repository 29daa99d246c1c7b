package quota

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestPoolDecidesTheCharge: quota alone decides what a request costs in
// its pool, whatever the caller estimated. A pool with tokens_per_minute
// charges the estimate to its token window and bounds it (a
// *ChargeTooLargeError above a minute's tokens); a pool without one
// charges requests alone — nothing to its tokens, nothing bounded, and
// Lease.Settle changes nothing there. Every shape — tokens on the
// account only, on a pool only, on both, on neither — over the
// in-process store and over Redis.
func TestPoolDecidesTheCharge(t *testing.T) {
	const tpm, estimate = 60000, 400
	srv := redistest.Start(t)
	shapes := []struct {
		name                string
		accountTPM, poolTPM int64
	}{
		{"account only", tpm, 0},
		{"pool only", 0, tpm},
		{"both", tpm, tpm},
		{"neither", 0, 0},
	}
	for _, backend := range []string{"memory", "redis"} {
		for _, sh := range shapes {
			t.Run(backend+"/"+sh.name, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Account.TokensPerMinute = sh.accountTPM
				cfg.Account.Models = []modelPool{{Name: "pool", Match: []string{"pool"}, RequestsPerMinute: 6000, TokensPerMinute: sh.poolTPM, MaxInFlight: 100}}
				if backend == "redis" {
					cfg.Store.RedisURL, cfg.Store.KeyPrefix, cfg.Store.Timeout = srv.URL(), redistest.Prefix(t), 2*time.Second
				}
				a := runAdmitter(t, cfg, nil)
				for _, p := range []struct {
					pool, label string
					tpm         int64
				}{{store.AccountPool, DefaultPool, sh.accountTPM}, {"pool", "pool", sh.poolTPM}} {
					checkPoolCharge(t, a, p.pool, p.label, p.tpm, estimate)
				}
			})
		}
	}
}

// checkPoolCharge admits one request estimated at estimate tokens to
// pool (for a model of its name, as its pattern matches; labelled label, enforcing tpm tokens a minute or none) and checks
// what its window was charged, then what a correction and an estimate
// above a minute's tokens do there.
func checkPoolCharge(t *testing.T, a *Admitter, pool, label string, tpm, estimate int64) {
	t.Helper()
	charged := int64(0)
	if tpm > 0 {
		charged = estimate
	}
	lease, err := a.Admit(t.Context(), Request{Model: Model{Name: pool}, Class: classify.Interactive, Tokens: estimate})
	if err != nil {
		t.Fatalf("pool %s: %v", label, err)
	}
	if got := a.State().Pools[label].Window.Tokens[classify.Interactive]; got != charged {
		t.Errorf("pool %s (%d tokens a minute): a request estimated at %d charged %d tokens, want %d", label, tpm, estimate, got, charged)
	}
	lease.Settle(Outcome{Status: 200, Usage: &Usage{Tokens: 10 * estimate, Settles: true}}) // a pool without tokens ignores it
	lease.Release()
	huge := Request{Model: Model{Name: pool}, Class: classify.Interactive, Tokens: 1 << 40}
	lease, err = a.Admit(t.Context(), huge)
	_, tooLarge := errors.AsType[*ChargeTooLargeError](err)
	switch {
	case tpm > 0 && !tooLarge:
		t.Errorf("pool %s (%d tokens a minute): an estimate of 2^40: %v, want a *ChargeTooLargeError", label, tpm, err)
	case tpm > 0:
	case err != nil:
		t.Errorf("pool %s (no token limit): an estimate of 2^40: %v, want admitted, charged requests alone", label, err)
	default:
		lease.Release()
		if got := a.State().Pools[label].Window.Tokens; got != (store.PerClass{}) {
			t.Errorf("pool %s (no token limit): its window holds %s tokens, want none", label, fmt.Sprint(got))
		}
	}
}
