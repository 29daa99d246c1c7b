package proxy

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestGraceEndingWaitsForTheServiceTime: during a drain, queued requests
// are refused at the last moment a newly admitted one could still finish:
// the service time lead before the end of the grace (at least a tenth of
// it), re-read as the drain goes, since requests completing during the
// drain are what teach it.
func TestGraceEndingWaitsForTheServiceTime(t *testing.T) {
	const grace = 10 * time.Second
	for _, tc := range []struct {
		name string
		lead func(elapsed time.Duration) time.Duration
		want time.Duration // when graceEnding runs, from the start of the drain
	}{
		{"unknown service time: a tenth of the grace, at most 1 s", func(time.Duration) time.Duration { return 0 }, grace - time.Second},
		{"known service time", func(time.Duration) time.Duration { return 3 * time.Second }, grace - 3*time.Second},
		{"learned during the drain", func(e time.Duration) time.Duration {
			if e < 5*time.Second {
				return 0
			}
			return 4 * time.Second
		}, 6 * time.Second},
		{"longer than the grace: at once", func(time.Duration) time.Duration { return time.Minute }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				fired := make(chan time.Duration, 1)
				s := &Server{grace: grace}
				s.OnGraceEnding(func() { fired <- time.Since(start) }, func() time.Duration { return tc.lead(time.Since(start)) })
				stop := make(chan struct{})
				defer close(stop)
				go s.watchGrace(start.Add(grace), stop)
				got := <-fired
				// It checks every graceCheck and fires one check early.
				if got > tc.want || got < tc.want-2*graceCheck {
					t.Errorf("graceEnding ran %s into the drain, want within %s before %s", got, 2*graceCheck, tc.want)
				}
			})
		})
	}
}
