package quota

import (
	"context"
	"sync"
	"testing"
)

// runner is what startRun runs: an Admitter or a limiter.
type runner interface {
	Run(ctx context.Context) error
}

// startRun runs r.Run in a goroutine of its own until stop is called or the
// test ends, whichever is first. stop cancels Run's context, waits for Run
// to return and requires that it returned nil; calling it again does
// nothing. Cleanups registered after startRun run before stop.
func startRun(tb testing.TB, r runner) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	tb.Cleanup(stop)
	return stop
}
