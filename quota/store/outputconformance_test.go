package store

import (
	"context"
	"testing"
	"time"
)

// outputLimits: requests, tokens and in flight far from binding; an output
// budget of 600 tokens a minute (a bucket of 600 refilled 10 a second),
// 180 of it reserved for interactive.
var outputLimits = Limits{AccountRPM: 600000, BulkRPM: 120000, ReserveRPM: 180000, InFlight: 1000, BulkInFlight: 200, ReserveInFlight: 300,
	Borrow: true, OutputLimits: OutputLimits{OutputTPM: 600, ReserveOutputTPM: 180}}

// runOutputConformance: the output budget is a bucket refilled at its
// rate up to a minute's worth and debited the output reported; bulk is
// held while it is below the reserve, until it is back there, interactive
// while it is spent, until it is not; debt is bounded by a minute's worth.
func runOutputConformance(t *testing.T, newStore newStoreFunc) {
	ms := time.Millisecond
	type step struct {
		at      time.Duration
		output  int64
		limits  Limits
		want    PerClass
		granted PerClass
		blocker [2]Blocker
		hold    time.Duration // bulk's hold after the call
		retry   time.Duration // 0: not checked
	}
	off := outputLimits
	off.OutputTPM, off.ReserveOutputTPM = 0, 0
	steps := []step{
		{0, 0, outputLimits, pc(1, 1), pc(1, 1), [2]Blocker{nb, nb}, 0, 0},                                                          // full: 600 tokens
		{10 * ms, 400, outputLimits, pc(0, 1), pc(0, 1), [2]Blocker{nb, nb}, 0, 0},                                                  // 200 left, above the reserve of 180
		{20 * ms, 21, outputLimits, pc(1, 1), pc(1, 0), [2]Blocker{nb, BlockedByUpstream}, 90 * ms, 90 * ms},                        // 179.1 left: 0.9 to refill
		{110 * ms, 0, outputLimits, pc(0, 1), pc(0, 1), [2]Blocker{nb, nb}, 0, 0},                                                   // back at the reserve
		{120 * ms, 197, outputLimits, pc(1, 1), pc(0, 0), [2]Blocker{BlockedByOutput, BlockedByUpstream}, 19690 * ms, 1691 * ms},    // 16.9 in debt
		{1811 * ms, 0, outputLimits, pc(1, 1), pc(1, 0), [2]Blocker{nb, BlockedByUpstream}, 17999 * ms, 17999 * ms},                 // 0.01 left
		{2 * time.Second, 100000, outputLimits, pc(0, 1), pc(0, 0), [2]Blocker{nb, BlockedByUpstream}, 78000 * ms, 0},               // debt bounded at a minute
		{3 * time.Second, 50, off, pc(1, 1), pc(1, 1), [2]Blocker{nb, nb}, 0, 0},                                                    // no budget: nothing held, output ignored
		{4 * time.Second, 0, outputLimits, pc(1, 1), pc(1, 1), [2]Blocker{nb, nb}, 0, 0},                                            // set again: full
		{5 * time.Second, 1 << 48, outputLimits, pc(1, 1), pc(0, 0), [2]Blocker{BlockedByOutput, BlockedByUpstream}, 78000 * ms, 0}, // 2^48 reported: a minute's debt, no overflow
	}
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, outputLimits, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(st.at)
		res, err := s.Take(context.Background(), TakeRequest{Want: st.want, Output: st.output, Limits: st.limits})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker || res.UpstreamHold != st.hold {
			t.Fatalf("step %d: granted %v blocked %v hold %s, want %v %v %s", i, res.Granted, res.Blocker, res.UpstreamHold, st.granted, st.blocker, st.hold)
		}
		if st.retry > 0 && res.RetryAfter != st.retry {
			t.Fatalf("step %d: RetryAfter %s, want %s", i, res.RetryAfter, st.retry)
		}
	}
}

// TestOutputBucketArithmetic: the bucket's units keep a slow budget exact
// under calls every millisecond (a rounding per call would never refill
// it), and a clock that steps back adds nothing.
func TestOutputBucketArithmetic(t *testing.T) {
	var b outputBucket
	const tpm = 1 // one token a minute: 1 unit a millisecond
	b.take(1, 1, tpm, 0)
	for ms := int64(2); ms <= 60001; ms++ {
		if bulk, _ := b.take(ms, 0, tpm, 1); ms == 60001 && bulk != 0 {
			t.Fatalf("after a minute of calls every millisecond: bulk held %d ms, want refilled", bulk)
		}
	}
	if _, interactive := b.take(60001, 2, tpm, 0); interactive != 60001 {
		t.Fatalf("a minute in debt: interactive held %d ms, want 60001", interactive)
	}
	if _, interactive := b.take(30000, 0, tpm, 0); interactive != 60001 {
		t.Fatalf("a clock stepped back: interactive held %d ms, want 60001 (nothing refilled)", interactive)
	}
}
