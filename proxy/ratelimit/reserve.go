package ratelimit

import "time"

// defaultHold is the hold [Observation.BelowReserve] assumes for a dimension
// that is below its reserve but did not say when it resets: long enough to
// stop a burst, short enough that a missing header does not park traffic.
const defaultHold = time.Second

// BelowReserve reports whether any known dimension has Remaining < fraction
// × Limit, and how long until every such dimension is back at its reserve
// under refill (see untilAbove): with a continuous refill that is the part
// of the reset it takes to climb back to fraction × Limit, with a window
// the whole reset. Unknown dimensions never count, nor does a dimension
// that reported only one of its counts. If a dimension is below but its
// Reset is unknown, BelowReserve uses a conservative default of 1s for it.
// An Observation that is OverLimit is below for defaultHold at least. A
// fraction of 0, a negative fraction or NaN is never below. hold is at
// most [MaxDuration], and may be 0 with below true when the upstream says
// the bucket is already replenishing.
//
// Anthropic rounds remaining tokens to the nearest thousand, so a reserve
// of fewer than about 1,000 tokens is below its measurement resolution.
func (o Observation) BelowReserve(fraction float64, refill Refill) (hold time.Duration, below bool) {
	if !(fraction > 0) {
		return 0, false
	}
	if o.OverLimit {
		below, hold = true, defaultHold
	}
	for _, w := range [...]Bucket{o.Requests, o.Tokens, o.InputTokens, o.OutputTokens} {
		if !w.Known() || !(float64(w.Remaining) < fraction*float64(w.Limit)) {
			continue
		}
		below = true
		hold = max(hold, untilAbove(w, fraction, refill))
	}
	return hold, below
}
