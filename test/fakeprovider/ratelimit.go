package fakeprovider

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// bucket is a token bucket of capacity units per minute, refilled
// continuously. The zero value is unlimited. It is not goroutine-safe; the
// Provider guards it.
type bucket struct {
	capacity float64 // units; 0 means unlimited
	perSec   float64 // refill rate, units per second
	level    float64 // units available; may be negative for requests
	last     time.Time
}

// limitState is what one debit leaves behind, for headers.
type limitState struct {
	limit     int           // capacity; 0 means unlimited (no headers)
	remaining int           // floor of the level, never below zero
	untilFull time.Duration // time until the bucket is full again
	retry     time.Duration // time until a request would be admitted
}

func newBucket(perMinute int) bucket {
	c := float64(perMinute)
	return bucket{capacity: c, perSec: c / 60, level: c}
}

// refill adds what accrued since the last call. A clock that steps back
// adds nothing.
func (b *bucket) refill(now time.Time) {
	if !b.last.IsZero() {
		if dt := now.Sub(b.last).Seconds(); dt > 0 {
			b.level = math.Min(b.capacity, b.level+dt*b.perSec)
		}
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
}

// admit debits one request at now and reports whether the bucket held at
// least one before the debit. Refused requests are debited too, down to
// -capacity: unsuccessful requests count against a provider's limit.
func (b *bucket) admit(now time.Time) (bool, limitState) {
	if b.capacity == 0 {
		return true, limitState{}
	}
	b.refill(now)
	ok := b.level >= 1
	b.level = math.Max(b.level-1, -b.capacity)
	return ok, b.state()
}

// spend debits n units at now without ever refusing, down to zero; it
// models a limit that is reported but not enforced.
func (b *bucket) spend(now time.Time, n int) limitState {
	if b.capacity == 0 {
		return limitState{}
	}
	b.refill(now)
	b.level = math.Max(b.level-float64(n), 0)
	return b.state()
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
		st := b.state()
		st.retry = b.secondsFor(float64(n) - b.level)
		return false, st
	}
	b.level -= float64(n)
	return true, b.state()
}

func (b *bucket) state() limitState {
	st := limitState{
		limit:     int(b.capacity),
		remaining: int(math.Floor(math.Max(b.level, 0))),
		untilFull: b.secondsFor(b.capacity - b.level),
	}
	if b.level < 1 {
		st.retry = b.secondsFor(1 - b.level)
	}
	return st
}

// secondsFor is the time the bucket takes to gain units, rounded up to the
// millisecond (less a hair of float error, so 1 unit at 40/min is 1.5s).
func (b *bucket) secondsFor(units float64) time.Duration {
	if units <= 0 {
		return 0
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
// values are absolute RFC 3339 instants, rounded up to the second.
func setAnthropicLimitHeaders(h http.Header, now time.Time, req, tok limitState) {
	set := func(kind string, st limitState) {
		if st.limit == 0 {
			return
		}
		h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.Itoa(st.limit))
		h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.Itoa(st.remaining))
		h.Set("anthropic-ratelimit-"+kind+"-reset", ceilSecond(now.Add(st.untilFull)).UTC().Format(time.RFC3339))
	}
	set("requests", req)
	set("tokens", tok)
}

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
