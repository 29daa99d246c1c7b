// Package poll waits in tests for state another goroutine or process owns
// and offers no event to wait on: a gauge on /metrics, a queue length, a
// breaker closing on its own timer.
package poll

import (
	"testing"
	"time"
)

// every is how often Until looks; limit is how long it waits at most.
const (
	every = 5 * time.Millisecond
	limit = 10 * time.Second
)

// Until calls cond every few milliseconds until it holds, and fails the
// test naming what it waited for if it does not within ten seconds.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
