package quota

import (
	"strings"
	"testing"
)

// TestMinInFlightValidate: min_in_flight is refused negative or above its
// max_in_flight, naming its key, on the account and on a pool; Pool
// carries a pool's adaptive keys, not the account's.
func TestMinInFlightValidate(t *testing.T) {
	cfg := chargeConfig()
	cfg.Account.MinInFlight = -1
	cfg.Account.Models[0].MinInFlight = cfg.Account.Models[0].MaxInFlight + 1
	err := cfg.Validate()
	for _, want := range []string{
		"account.min_in_flight: must be >= 0",
		"account.models[0].min_in_flight: must be <= account.models[0].max_in_flight",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
	cfg = chargeConfig()
	cfg.Account.AdaptiveInFlight, cfg.Account.MinInFlight = true, cfg.Account.MaxInFlight
	cfg.Account.Models[0].AdaptiveInFlight, cfg.Account.Models[0].MinInFlight = true, 2
	if err := cfg.Validate(); err != nil {
		t.Fatalf("min_in_flight at max_in_flight: %v", err)
	}
	pool := cfg.Account.Models[0].Name
	if a := cfg.Pool(pool).Account; !a.AdaptiveInFlight || a.MinInFlight != 2 {
		t.Errorf("Pool(%q) = adaptive %v, min %d; want true, 2", pool, a.AdaptiveInFlight, a.MinInFlight)
	}
	cfg.Account.Models[0].AdaptiveInFlight = false
	if a := cfg.Pool(pool).Account; a.AdaptiveInFlight {
		t.Errorf("Pool(%q) inherited the account's adaptive_in_flight", pool)
	}
}

// TestAdaptivePoolWithoutRPM: a self-hosted server publishes no request
// rate, so an adaptive pool may leave requests_per_minute unset — the
// issue's own example does — and then only its bound binds (the windows
// allow noRequestLimit); without adaptive_in_flight it is refused, naming
// the key.
func TestAdaptivePoolWithoutRPM(t *testing.T) {
	cfg := chargeConfig()
	cfg.Account.Models[0].RequestsPerMinute = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "account.models[0].requests_per_minute: must be > 0 (or unset with adaptive_in_flight") {
		t.Errorf("a static pool without requests_per_minute: %v; want it refused, naming the key", err)
	}
	cfg.Account.Models[0].AdaptiveInFlight = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("an adaptive pool without requests_per_minute: %v", err)
	}
	lim := cfg.Pool(cfg.Account.Models[0].Name).Limits()
	if lim.AccountRPM != noRequestLimit || lim.InFlight != cfg.Account.Models[0].MaxInFlight {
		t.Errorf("its limits: %d requests a minute, %d in flight; want no request limit (%d) and its max_in_flight", lim.AccountRPM, lim.InFlight, noRequestLimit)
	}
}
