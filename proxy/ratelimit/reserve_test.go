package ratelimit

import (
	"testing"
	"time"
)

func TestBelowReserve(t *testing.T) {
	// obs builds an Observation from requests and tokens windows.
	obs := func(requests, tokens Bucket) Observation {
		o := Unknown()
		o.Requests, o.Tokens = requests, tokens
		return o
	}
	tests := []struct {
		name     string
		o        Observation
		fraction float64
		hold     time.Duration
		below    bool
	}{
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold, below := tt.o.BelowReserve(tt.fraction)
			if hold != tt.hold || below != tt.below {
				t.Errorf("BelowReserve(%v) = (%v, %v), want (%v, %v)", tt.fraction, hold, below, tt.hold, tt.below)
			}
		})
	}
}

func TestBelowReserveNaN(t *testing.T) {
	o := Unknown()
	o.Requests = win(60, 0, time.Second)
	var zero float64
	if hold, below := o.BelowReserve(zero / zero); below || hold != 0 {
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
		if hold, below := o.BelowReserve(fraction); below {
			t.Errorf("BelowReserve(%v) = (%v, true), want not below", fraction, hold)
		}
	}
}
