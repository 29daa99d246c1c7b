package ratelimit

import (
	"testing"
	"time"
)

// TestBelowReserve: with a window refill a dimension below its reserve is
// held for its whole reset.
func TestBelowReserve(t *testing.T) {
	tests := []reserveCase{
		{"healthy", obs(win(60, 59, time.Second), win(150000, 149984, 6*time.Minute)), 0.2, 0, false},
		{"requests below", obs(win(60, 5, 10*time.Second), win(150000, 149984, 6*time.Minute)), 0.2, 10 * time.Second, true},
		{"tokens below", obs(win(60, 59, time.Second), win(150000, 1000, 300*time.Second)), 0.2, 300 * time.Second, true},
		{"both below takes the longest reset", obs(win(60, 0, 10*time.Second), win(150000, 0, 55*time.Second)), 0.2, 55 * time.Second, true},
		{"longest reset of the below ones only", obs(win(60, 0, 10*time.Second), win(150000, 149984, time.Hour)), 0.2, 10 * time.Second, true},
		{"at the reserve is not below", obs(win(100, 20, time.Second), unknownBucket()), 0.2, 0, false},
		{"one under the reserve", obs(win(100, 19, time.Second), unknownBucket()), 0.2, time.Second, true},
		{"unknown reset holds 1s", obs(win(60, 0, -1), unknownBucket()), 0.2, time.Second, true},
		{"zero reset holds 0", obs(win(60, 0, 0), unknownBucket()), 0.2, 0, true},
		{"oversized reset capped", obs(win(60, 0, 48*time.Hour), unknownBucket()), 0.2, MaxDuration, true},
		{"unknown never below", Unknown(), 0.9, 0, false},
		{"zero value never below", Observation{}, 0.9, 0, false},
		{"azure sentinel never below", obs(win(100, 99, time.Minute), unknownBucket()), 0.5, 0, false},
		{"remaining-only never below", obs(win(-1, 0, -1), win(-1, 0, time.Second)), 0.5, 0, false},
		{"limit-only never below", obs(win(60, -1, time.Second), unknownBucket()), 0.5, 0, false},
		{"reserve 0 never below even when exhausted", obs(win(60, 0, time.Second), win(150000, 0, time.Minute)), 0, 0, false},
		{"negative reserve never below", obs(win(60, 0, time.Second), unknownBucket()), -1, 0, false},
		{"over its limit (Fireworks) is below for 1s", Observation{Requests: win(6000, 5990, -1), Tokens: unknownBucket(),
			InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1, OverLimit: true}, 0.2, time.Second, true},
		{"over its limit with a longer reset below takes the reset", Observation{Requests: win(60, 0, 5*time.Second), Tokens: unknownBucket(),
			InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1, OverLimit: true}, 0.2, 5 * time.Second, true},
		{"over its limit at reserve 0 is never below", Observation{Requests: unknownBucket(), Tokens: unknownBucket(),
			InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: -1, OverLimit: true}, 0, 0, false},
		{"fireworks generated tokens below", Observation{Requests: unknownBucket(), Tokens: unknownBucket(),
			InputTokens: win(100000, 99000, -1), OutputTokens: win(10000, 500, -1), RetryAfter: -1}, 0.2, time.Second, true},
		{
			"anthropic output tokens below",
			Observation{
				Requests:     win(1000, 999, 0),
				Tokens:       win(96000, 90000, 0),
				InputTokens:  win(80000, 80000, 0),
				OutputTokens: win(16000, 1000, 30*time.Second),
				RetryAfter:   -1,
			},
			0.1, 30 * time.Second, true,
		},
		{
			"retry hint alone is not a reserve",
			Observation{Requests: unknownBucket(), Tokens: unknownBucket(), InputTokens: unknownBucket(), OutputTokens: unknownBucket(), RetryAfter: time.Minute},
			0.5, 0, false,
		},
	}
	runReserveTable(t, RefillWindow, tests)
}

// obs builds an Observation from requests and tokens buckets.
func obs(requests, tokens Bucket) Observation {
	o := Unknown()
	o.Requests, o.Tokens = requests, tokens
	return o
}

// reserveCase is one row of a BelowReserve table.
type reserveCase struct {
	name     string
	o        Observation
	fraction float64
	hold     time.Duration
	below    bool
}

func runReserveTable(t *testing.T, refill Refill, tests []reserveCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold, below := tt.o.BelowReserve(tt.fraction, refill)
			if hold != tt.hold || below != tt.below {
				t.Errorf("BelowReserve(%v, %s) = (%v, %v), want (%v, %v)", tt.fraction, refill, hold, below, tt.hold, tt.below)
			}
		})
	}
}

func TestBelowReserveNaN(t *testing.T) {
	o := Unknown()
	o.Requests = win(60, 0, time.Second)
	var zero float64
	if hold, below := o.BelowReserve(zero/zero, RefillContinuous); below || hold != 0 {
		t.Errorf("BelowReserve(NaN) = (%v, %v), want (0, false)", hold, below)
	}
}

// TestAzureSentinelNeverHolds follows the sentinel from headers to the
// reserve decision: Azure's -1 tokens must not hold traffic.
func TestAzureSentinelNeverHolds(t *testing.T) {
	o := Parse(header(
		"x-ratelimit-limit-tokens", "-1",
		"x-ratelimit-remaining-tokens", "-1",
		"x-ratelimit-reset-tokens", "0",
	), receipt)
	if o.Tokens.Known() {
		t.Fatalf("Tokens = %+v, want unknown", o.Tokens)
	}
	for _, fraction := range []float64{0.01, 0.5, 1} {
		if hold, below := o.BelowReserve(fraction, RefillContinuous); below {
			t.Errorf("BelowReserve(%v) = (%v, true), want not below", fraction, hold)
		}
	}
}

// TestBelowReserveContinuous: with a continuous refill from Remaining to
// Limit over Reset, a dimension below its reserve is held only until it is
// back at the reserve: Reset × (reserve·Limit − Remaining) / (Limit −
// Remaining); the longest such wait among the dimensions below decides.
func TestBelowReserveContinuous(t *testing.T) {
	tests := []reserveCase{
		// 12,000 tokens a minute, a tenth left: full in 54 s at 200 a
		// second, back at the reserve (2,400) in 6 s.
		{"issue 13's case: a tenth left, reserve 0.2", obs(unknownBucket(), win(12000, 1200, 54*time.Second)), 0.2, 6 * time.Second, true},
		{"empty, reserve 0.2: a fifth of the reset", obs(win(100, 0, time.Minute), unknownBucket()), 0.2, 12 * time.Second, true},
		{"one under the reserve", obs(win(100, 19, 81*time.Second), unknownBucket()), 0.2, time.Second, true},
		{"reserve 1: the whole reset", obs(win(100, 40, 36*time.Second), unknownBucket()), 1, 36 * time.Second, true},
		{"at the reserve is not below", obs(win(100, 20, 48*time.Second), unknownBucket()), 0.2, 0, false},
		{"above the reserve is not below", obs(win(100, 90, 6*time.Second), unknownBucket()), 0.2, 0, false},
		{"limit = remaining is not below", obs(win(100, 100, 0), unknownBucket()), 0.2, 0, false},
		{"the longest of the dimensions below", obs(win(100, 0, time.Minute), win(12000, 1200, 54*time.Second)), 0.2, 12 * time.Second, true},
		{"reset 0: refilling now", obs(win(100, 0, 0), unknownBucket()), 0.2, 0, true},
		{"unknown reset holds 1s", obs(win(100, 0, -1), unknownBucket()), 0.2, time.Second, true},
		{"oversized reset capped before the share", obs(win(100, 0, 48*time.Hour), unknownBucket()), 0.5, MaxDuration / 2, true},
		{"unknown counts never below", obs(win(-1, 0, time.Minute), win(100, -1, time.Minute)), 0.5, 0, false},
	}
	runReserveTable(t, RefillContinuous, tests)
}

// TestHoldUnderEitherRefill: the same reading holds shorter under a
// continuous refill than under a window, and never longer.
func TestHoldUnderEitherRefill(t *testing.T) {
	o := Unknown()
	o.Tokens = win(12000, 1200, 54*time.Second)
	cont, _ := o.BelowReserve(0.2, RefillContinuous)
	window, _ := o.BelowReserve(0.2, RefillWindow)
	if cont != 6*time.Second || window != 54*time.Second {
		t.Fatalf("continuous %v, window %v; want 6s and 54s", cont, window)
	}
}
