package ratelimit

import "time"

// Refill is how a provider's bucket comes back, which decides how long a
// dimension below a reserve stays below it.
type Refill string

// The refill models.
const (
	// RefillContinuous is a token bucket replenished continuously up to its
	// limit, the reset being the time until it is full (OpenAI and
	// Anthropic document theirs so): the remaining count climbs linearly
	// from what was reported to the limit over the reset.
	RefillContinuous Refill = "continuous"
	// RefillWindow is a fixed window: nothing comes back before the reset,
	// everything at it.
	RefillWindow Refill = "window"
)

// untilAbove is how long a bucket b, known and below fraction of its
// limit, takes to be back at fraction·limit under refill: the whole reset
// for a window; for a continuous refill from Remaining to Limit over
// Reset, Reset × (fraction·Limit − Remaining) / (Limit − Remaining). An
// unknown reset is defaultHold; a reset of 0 means it is refilling now.
// This is the one place the hold arithmetic lives.
func untilAbove(b Bucket, fraction float64, refill Refill) time.Duration {
	if b.Reset < 0 {
		return defaultHold
	}
	reset := min(b.Reset, MaxDuration)
	span := float64(b.Limit - b.Remaining)
	if refill != RefillContinuous || span <= 0 {
		return reset
	}
	need := fraction*float64(b.Limit) - float64(b.Remaining)
	return time.Duration(float64(reset) * min(1, max(0, need/span)))
}
