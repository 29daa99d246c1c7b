package store

import (
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// TestRedisFairSplitCountsTokens: where the pool limits tokens, the
// replicas with waiters share a fair class's second in tokens, as each
// replica's own queue counts service (package quota's fair.go): a replica of large
// requests and one of small ones each take half the second's tokens in
// its first half, within one request's size — not half the requests,
// which let the first to ask take every token. After the split (its
// second half) what is left goes to anyone.
func TestRedisFairSplitCountsTokens(t *testing.T) {
	const (
		perSecond = 1000 // tokens
		large     = 100  // a's requests
		small     = 10   // b's
	)
	lim := Limits{AccountRPM: 6000, BulkRPM: 6000, InFlight: 10000, BulkInFlight: 10000, AccountTPM: 60 * perSecond, BulkTPM: 60 * perSecond}
	lim.Fair = [classify.NumClasses]bool{true, true}
	a, b, advance := expiringPair(t)
	ctx := t.Context()
	list := func(n int, cost int64) []Queued {
		ws := make([]Queued, n)
		for i := range ws {
			ws[i].Cost = cost
		}
		return ws
	}
	take := func(s *Redis, class classify.Class, n int, cost int64) int64 {
		t.Helper()
		req := TakeRequest{Limits: lim}
		req.Want[class], req.Waiters[class] = int64(n), list(n, cost)
		r, err := s.Take(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Granted[class] * cost
	}
	for _, c := range classify.Classes {
		t.Run(c.String(), func(t *testing.T) {
			advance(10 * time.Second) // a fresh second, the last one's use long gone
			take(b, c, 1, 0)          // b had waiters the second before
			advance(time.Second)
			gotA := take(a, c, 50, large) // a asks first, for five seconds' tokens
			gotB := take(b, c, 500, small)
			if gotA > perSecond/2+large || gotB < perSecond/2-large {
				t.Fatalf("first half: a (requests of %d) took %d tokens, b (of %d) %d; want %d each within a request's size",
					large, gotA, small, gotB, perSecond/2)
			}
			advance(600 * time.Millisecond)
			if left := take(a, c, 50, large); gotA+gotB+left < perSecond-large {
				t.Fatalf("second half: a took %d more, %d in all of %d: what the split left went unused", left, gotA+gotB+left, perSecond)
			}
			advance(400 * time.Millisecond) // back on a whole second
		})
	}
}
