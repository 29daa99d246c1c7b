package store

import (
	"math"
	"time"
)

// RetryAfterAt is when a request behind ahead others may go at rate a
// second, at least a second and at most an hour.
func RetryAfterAt(rate float64, ahead int) time.Duration {
	if rate <= 0 {
		return time.Hour
	}
	secs := math.Ceil(float64(ahead+1) / rate)
	return time.Duration(min(max(secs, 1), 3600)) * time.Second
}

// Notify wakes a goroutine waiting on ch without blocking; ch has room for
// one wake-up, so bursts coalesce.
func Notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Retry is how long the loop waits after a failed store call.
const Retry = 50 * time.Millisecond

// StoppedTimer is a timer that has not been armed.
func StoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// HeartbeatTicker ticks every d, and never when d is 0; stop stops it.
func HeartbeatTicker(d time.Duration) (beat <-chan time.Time, stop func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// MaxBatch bounds the waiters listed in one call per class.
const MaxBatch = 4096
