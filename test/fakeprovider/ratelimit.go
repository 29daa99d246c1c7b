package fakeprovider

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// bucket is a token bucket of capacity units per minute. It refills
// continuously (OpenAI, Anthropic) or, with a window, all at once at the
// start of each fixed window of that length, Unix-aligned, to the window's
// share of the minute (as Azure OpenAI evaluates its limits "over a small
// period of time, typically 1 or 10 seconds"). The zero value is
// unlimited. It is not goroutine-safe; the Provider guards it.
type bucket struct {
	capacity float64       // units per minute; 0 means unlimited
	window   time.Duration // fixed windows of this length; 0 refills continuously
	full     float64       // the level when full: capacity, or a window's share of it
	perSec   float64       // continuous refill rate, units per second
	level    float64       // units available; may be negative (debts)
	last     time.Time
}

// limitState is what one debit leaves behind, for headers.
type limitState struct {
	limit     int           // capacity per minute; 0 means unlimited (no headers)
	remaining int           // the level at the per-minute scale, floored, never below zero
	untilFull time.Duration // time until the bucket is full again
	retry     time.Duration // time until a request would be admitted
	// full and left are the bucket's level when full and now, floored,
	// never below zero: the limit and remaining over the bucket's own
	// span (a dialect's, dialects.go), where limit and remaining are a
	// minute's. over says the level is below zero: more was spent than
	// the bucket held.
	full, left int
	over       bool
}

func newBucket(perMinute int, window time.Duration) bucket {
	c := float64(perMinute)
	b := bucket{capacity: c, window: window, full: c, perSec: c / 60}
	if window > 0 {
		b.full = c * window.Seconds() / 60
	}
	b.level = b.full
	return b
}

// refill adds what accrued since the last call: continuously, or the whole
// window's share when now is in a later window. A clock that steps back
// adds nothing.
func (b *bucket) refill(now time.Time) {
	switch {
	case b.last.IsZero():
	case b.window > 0:
		if now.Truncate(b.window).After(b.last.Truncate(b.window)) {
			b.level = b.full
		}
	default:
		if dt := now.Sub(b.last).Seconds(); dt > 0 {
			b.level = math.Min(b.full, b.level+dt*b.perSec)
		}
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
}

// admit debits one request at now and reports whether the bucket held at
// least one before the debit. Refused requests are debited too, down to
// -full: unsuccessful requests count against a provider's limit.
func (b *bucket) admit(now time.Time) (bool, limitState) {
	if b.capacity == 0 {
		return true, limitState{}
	}
	b.refill(now)
	ok := b.level >= 1
	b.level = math.Max(b.level-1, -b.full)
	return ok, b.state(now)
}

// spend debits n units at now without ever refusing, down to zero; it
// models a limit that is reported but not enforced.
func (b *bucket) spend(now time.Time, n int) limitState {
	if b.capacity == 0 {
		return limitState{}
	}
	b.refill(now)
	b.level = math.Max(b.level-float64(n), 0)
	return b.state(now)
}

// owe debits n units at now without refusing, into debt down to -full:
// what was spent already (output generated) cannot be refused.
func (b *bucket) owe(now time.Time, n int) {
	if b.capacity == 0 {
		return
	}
	b.refill(now)
	b.level = math.Max(b.level-float64(n), -b.full)
}

// take debits n units at now if the bucket holds them, and reports
// whether it did; a refused charge debits nothing and says when n will be
// there.
func (b *bucket) take(now time.Time, n int) (bool, limitState) {
	if b.capacity == 0 {
		return true, limitState{}
	}
	b.refill(now)
	if b.level < float64(n) {
		st := b.state(now)
		st.retry = b.until(now, float64(n)-b.level)
		return false, st
	}
	b.level -= float64(n)
	return true, b.state(now)
}

// positive reports, at now, whether the bucket holds anything (a limit
// evaluated in real time refuses once it is spent), and its state.
func (b *bucket) positive(now time.Time) (bool, limitState) {
	if b.capacity == 0 {
		return true, limitState{}
	}
	b.refill(now)
	st := b.state(now)
	if b.level > 0 {
		return true, st
	}
	st.retry = b.until(now, -b.level+1)
	return false, st
}

// stateAt is the bucket's state at now, refilled; nothing for an
// unlimited bucket.
func (b *bucket) stateAt(now time.Time) limitState {
	if b.capacity == 0 {
		return limitState{}
	}
	b.refill(now)
	return b.state(now)
}

func (b *bucket) state(now time.Time) limitState {
	st := limitState{
		limit:     int(b.capacity),
		remaining: int(math.Floor(math.Max(b.level, 0) * b.capacity / b.full)),
		untilFull: b.until(now, b.full-b.level),
		full:      int(math.Floor(b.full)),
		left:      int(math.Floor(math.Max(b.level, 0))),
		over:      b.level < 0,
	}
	if b.level < 1 {
		st.retry = b.until(now, 1-b.level)
	}
	return st
}

// until is how long from now the bucket takes to gain units: the end of
// the window with fixed windows, else at the refill rate, rounded up to
// the millisecond (less a hair of float error, so 1 unit at 40/min is
// 1.5s).
func (b *bucket) until(now time.Time, units float64) time.Duration {
	if units <= 0 {
		return 0
	}
	if b.window > 0 {
		return now.Truncate(b.window).Add(b.window).Sub(now)
	}
	ms := math.Ceil(units*60000/b.capacity - 1e-6)
	return time.Duration(ms) * time.Millisecond
}

// setOpenAILimitHeaders writes the x-ratelimit-* family; reset values are
// Go durations, as OpenAI sends them.
func setOpenAILimitHeaders(h http.Header, req, tok limitState) {
	setXRateLimitHeaders(h, req, tok, time.Duration.String)
}

// setXRateLimitHeaders writes the x-ratelimit-* family, with reset values
// as reset formats them.
func setXRateLimitHeaders(h http.Header, req, tok limitState, reset func(time.Duration) string) {
	set := func(kind string, st limitState) {
		if st.limit == 0 {
			return
		}
		h.Set("x-ratelimit-limit-"+kind, strconv.Itoa(st.limit))
		h.Set("x-ratelimit-remaining-"+kind, strconv.Itoa(st.remaining))
		h.Set("x-ratelimit-reset-"+kind, reset(st.untilFull))
	}
	set("requests", req)
	set("tokens", tok)
}

// setAzureLimitHeaders writes the x-ratelimit-* family as Azure OpenAI
// does: resets in bare seconds ("10", "300"), rounded up.
func setAzureLimitHeaders(h http.Header, req, tok limitState) {
	setXRateLimitHeaders(h, req, tok, func(d time.Duration) string {
		return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
	})
}

// setAnthropicLimitHeaders writes the anthropic-ratelimit-* family; reset
// values are absolute RFC 3339 instants, rounded up to the second, and
// token remainders are rounded to the nearest thousand, as Anthropic's
// are. With an output bucket (output.limit > 0) tok is the input bucket:
// it writes the input-tokens and output-tokens families, and tokens as
// their sum ("if Workspace limits do not apply, … the sum of input and
// output tokens"); without one, tokens alone.
func setAnthropicLimitHeaders(h http.Header, now time.Time, req, tok, output limitState) {
	set := func(kind string, st limitState, remaining int) {
		if st.limit == 0 {
			return
		}
		h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.Itoa(st.limit))
		h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.Itoa(remaining))
		h.Set("anthropic-ratelimit-"+kind+"-reset", ceilSecond(now.Add(st.untilFull)).UTC().Format(time.RFC3339))
	}
	set("requests", req, req.remaining)
	if output.limit == 0 || tok.limit == 0 {
		set("tokens", tok, roundThousand(tok.remaining))
		return
	}
	set("input-tokens", tok, roundThousand(tok.remaining))
	set("output-tokens", output, roundThousand(output.remaining))
	sum := limitState{limit: tok.limit + output.limit, untilFull: max(tok.untilFull, output.untilFull)}
	set("tokens", sum, roundThousand(tok.remaining+output.remaining))
}

// roundThousand rounds n to the nearest thousand, halves up.
func roundThousand(n int) int { return (n + 500) / 1000 * 1000 }

// setRetryAfter writes retry-after in whole seconds (at least 1) and
// retry-after-ms.
func setRetryAfter(h http.Header, d time.Duration) {
	secs := max(int64(math.Ceil(d.Seconds())), 1)
	ms := max(int64(math.Ceil(float64(d)/float64(time.Millisecond))), 1)
	h.Set("retry-after", strconv.FormatInt(secs, 10))
	h.Set("retry-after-ms", strconv.FormatInt(ms, 10))
}

func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
