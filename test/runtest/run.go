package runtest

import (
	"context"
	"sync"
	"testing"
)

// Runner is what Start runs: anything with a Run loop that serves until
// its context ends.
type Runner interface {
	// Run serves until ctx ends and returns nil then, or the error that
	// stopped it.
	Run(ctx context.Context) error
}

// Start runs r.Run in a goroutine of its own until stop is called or the
// test ends, whichever is first. stop cancels Run's context, waits for Run
// to return and requires that it returned nil; calling it again does
// nothing. Cleanups registered after Start run before stop.
func Start(tb testing.TB, r Runner) (stop func()) {
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
