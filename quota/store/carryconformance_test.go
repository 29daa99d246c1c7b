package store

import (
	"context"
	"testing"
	"time"
)

// runCarryConformance: no single charge poisons the token windows. A
// request charged far past a second's allowance (2^48 tokens, as a body
// asking max_tokens 1e300 once was) overshoots its second, and the
// overshoot carried into the seconds that follow is bounded by one minute
// of the pool's allowance: with 10 tokens a second, interactive is
// blocked for the minute that follows — the most one request can cost —
// and admitted in the second after it, where unbounded it was blocked for
// 2^48 / 10 seconds (about 890,000 years). A correction that settles a
// charge up by as much is bounded alike.
func runCarryConformance(t *testing.T, newStore newStoreFunc) {
	const poison = int64(1) << 48
	type step struct {
		sec     int64
		costs   [2][]int64
		corr    PerClass
		granted PerClass
		blocker [2]Blocker
	}
	one := [2][]int64{{1}, nil} // an interactive request of one token
	// minute is a call every second from first, so every second carries
	// into the next: each carries 600, 590, …, 10 tokens, at least the
	// second's 10, and the request waits; in the second after, it goes.
	minute := func(first int64) []step {
		var out []step
		for sec := first; sec < first+60; sec++ {
			out = append(out, step{sec: sec, costs: one, granted: pc(0, 0), blocker: [2]Blocker{bw, nb}})
		}
		return append(out, step{sec: first + 60, costs: one, granted: pc(1, 0), blocker: [2]Blocker{nb, nb}})
	}
	steps := []step{{sec: 0, costs: [2][]int64{nil, {poison}}, granted: pc(0, 1), blocker: [2]Blocker{nb, nb}}} // bulk's first of a second goes
	steps = append(steps, minute(1)...)
	// Settled up by 2^48 (a response reporting that much): that second is
	// spent, and the carry is the same minute again.
	steps = append(steps, step{sec: 62, corr: pc(poison, 0), costs: one, granted: pc(0, 0), blocker: [2]Blocker{bw, nb}})
	steps = append(steps, minute(63)...)
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, tokenLimits, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(time.Duration(st.sec) * time.Second)
		want := pc(int64(len(st.costs[0])), int64(len(st.costs[1])))
		res, err := s.Take(context.Background(), TakeRequest{Want: want, Waiters: listed(st.costs), Corrections: st.corr, Limits: tokenLimits})
		if err != nil {
			t.Fatalf("step %d (second %d): %v", i, st.sec, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker {
			t.Fatalf("step %d (second %d): granted %v blocked %v, want %v %v (window tokens %v)",
				i, st.sec, res.Granted, res.Blocker, st.granted, st.blocker, res.Window.Tokens)
		}
	}
}
