package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/runtest"
)

// TestOutageLoggedThreeWays: five minutes of a store that does not answer,
// probed once a (simulated) second, are logged as one store_degraded, a
// store_still_degraded a minute with the attempts and the last error, and
// one store_recovered with the outage's length — not a line per attempt
// (issue 23: go-redis and the probe together wrote ~14,000 lines an hour).
// The end of the outage flushes go-redis's own count (recovered).
func TestOutageLoggedThreeWays(t *testing.T) {
	var clock sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	tick := func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	const attempts = 300
	var probes int
	probe := func(context.Context) error {
		clock.Lock()
		defer clock.Unlock()
		now = now.Add(time.Second)
		if probes++; probes > attempts {
			return nil
		}
		return errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")
	}
	logs := &runtest.Buffer{}
	b := newBreaker(probe, time.Millisecond, OnErrorLocal, slog.New(slog.NewJSONHandler(logs, nil)))
	b.now = tick
	flushed := false
	b.recovered = func() { flushed = true }
	t.Cleanup(b.Close)

	b.failed(t.Context(), errors.New("i/o timeout"))
	waitUntil(t, "the probe to see the store answer", func() bool { return !b.Degraded() })
	b.succeeded()

	out := logs.String()
	if n := countLines(out, "store_degraded"); n != 1 {
		t.Errorf("store_degraded logged %d times, want once", n)
	}
	if n := countLines(out, "store_still_degraded"); n != 5 {
		t.Errorf("store_still_degraded logged %d times over 5 minutes, want one a minute (5)", n)
	}
	if n := countLines(out, "store_recovered"); n != 1 {
		t.Errorf("store_recovered logged %d times, want once", n)
	}
	for _, want := range []string{`"failed_calls":301`, `"outage":301000000000`, `"last_error":"dial tcp 10.0.0.7:6379: connect: connection refused"`, `"for":300000000000`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if !flushed {
		t.Error("the end of the outage did not flush go-redis's count")
	}
	if lines := strings.Count(out, "\n"); lines != 7 {
		t.Errorf("%d lines for a five-minute outage, want 7:\n%s", lines, out)
	}
}
