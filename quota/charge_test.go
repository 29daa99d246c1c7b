package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// chargeConfig enforces 6,000 tokens a minute on the account (its
// max_request_tokens left at 0: a minute's allowance), and has a pool
// bounding one request at 1,000 tokens and a pool enforcing no tokens.
func chargeConfig() Config {
	cfg := DefaultConfig()
	cfg.Account.TokensPerMinute = 6000
	cfg.Account.Models = []modelPool{
		{Name: "gpt-4o", Match: []string{"gpt-4o"}, RequestsPerMinute: 6000, TokensPerMinute: 60000, MaxRequestTokens: 1000, MaxInFlight: 100},
		{Name: "local", Match: []string{"local"}, RequestsPerMinute: 6000, MaxInFlight: 100},
	}
	return cfg
}

// TestChargeTooLarge: a request charged more than one request may be
// charged in its pool is refused at once with a *ChargeTooLargeError
// naming the limit and its key, and charges nothing; at the limit it is
// admitted; a pool that does not enforce tokens bounds nothing. The same
// over the in-process store and over Redis: the bound is decided before
// any store is asked.
func TestChargeTooLarge(t *testing.T) {
	srv := redistest.Start(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := chargeConfig()
			if backend == "redis" {
				cfg.Store.RedisURL, cfg.Store.KeyPrefix, cfg.Store.Timeout = srv.URL(), redistest.Prefix(t), 2*time.Second
			}
			a := runAdmitter(t, cfg, nil)
			tests := []struct {
				pool       string
				tokens     int64
				limit      int64 // 0: admitted
				key, label string
			}{
				{store.AccountPool, 6000, 0, "", ""},
				{store.AccountPool, 6001, 6000, "account.tokens_per_minute", DefaultPool},
				{store.AccountPool, 1 << 48, 6000, "account.tokens_per_minute", DefaultPool},
				{"not-configured", 1 << 62, 6000, "account.tokens_per_minute", DefaultPool}, // draws on the account
				{"gpt-4o", 1000, 0, "", ""},
				{"gpt-4o", 1001, 1000, "account.models[0].max_request_tokens", "gpt-4o"},
				{"local", 1 << 62, 0, "", ""}, // tokens not enforced: nothing to bound
			}
			for _, tt := range tests {
				lease, err := a.Admit(t.Context(), Request{Model: Model{Name: tt.pool}, Class: classify.Bulk, Tokens: tt.tokens})
				if tt.limit == 0 {
					if err != nil {
						t.Fatalf("pool %q, %d tokens: %v, want admitted", tt.pool, tt.tokens, err)
					}
					lease.Release()
					continue
				}
				tooLarge, ok := errors.AsType[*ChargeTooLargeError](err)
				if !ok || lease != nil {
					t.Fatalf("pool %q, %d tokens: %v, want a *ChargeTooLargeError", tt.pool, tt.tokens, err)
				}
				want := ChargeTooLargeError{Tokens: tt.tokens, Limit: tt.limit, Key: tt.key, Pool: tt.label}
				if *tooLarge != want {
					t.Fatalf("pool %q, %d tokens: %+v, want %+v", tt.pool, tt.tokens, *tooLarge, want)
				}
			}
			// Refused before it queued: nothing charged but what was admitted.
			for name, p := range a.State().Pools {
				if q := p.Queued["bulk"]; q != 0 {
					t.Errorf("pool %s: %d queued after the refusals", name, q)
				}
			}
			if got := a.State().Pools["gpt-4o"].Window.Tokens; got[classify.Bulk] > 1000 {
				t.Errorf("pool gpt-4o's window holds %v tokens, want the 1,000 admitted at most", got)
			}
		})
	}
}

// TestMaxRequestTokensValidate: max_request_tokens is refused negative or
// above its tokens_per_minute, naming its key, on the account and on a
// pool.
func TestMaxRequestTokensValidate(t *testing.T) {
	cfg := chargeConfig()
	cfg.Account.MaxRequestTokens = -1
	cfg.Account.Models[0].MaxRequestTokens = 60001
	err := cfg.Validate()
	for _, want := range []string{
		"account.max_request_tokens: must be >= 0",
		"account.models[0].max_request_tokens: must be <= account.models[0].tokens_per_minute (60000)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
	cfg = chargeConfig()
	cfg.Account.MaxRequestTokens = 6000
	if err := cfg.Validate(); err != nil {
		t.Errorf("max_request_tokens at tokens_per_minute: %v", err)
	}
}
