package quota

import (
	"context"
	"testing"
	"time"
)

// capStep is one Take with capped callers and what it must answer.
type capStep struct {
	at      time.Duration
	list    [2][]int // each class's waiters, by cap position (0: uncapped)
	held    []int64  // this replica's in flight under each cap
	granted PerClass
	blocker [2]blocker
	caps    []capResult
}

// capsUnder are the two capped callers of runCapConformance: one at 2 in
// flight, one at 3 a second.
var capsUnder = []capBounds{{MaxInFlight: 2, RequestsPerMinute: unbounded}, {MaxInFlight: unbounded, RequestsPerMinute: 180}}

// runCapConformance: the store grants a class's waiters in the order
// listed, passes over a capped caller's waiter once its cap is full and
// grants the next one; a class held only by caps is blockedByCap, which
// does not stop bulk borrowing; a cap's window resets every second and
// its in-flight count is what the replica says it holds.
func runCapConformance(t *testing.T, newStore newStoreFunc) {
	const A, B = 1, 2
	full := func(i, b, fleet int64) capResult {
		return capResult{Granted: pc(i, b), FleetInFlight: fleet, Full: true}
	}
	room := func(i, b, fleet int64) capResult { return capResult{Granted: pc(i, b), FleetInFlight: fleet} }
	steps := []capStep{
		{0, [2][]int{{A, A, A, 0, B, B, B, B, 0}, nil}, []int64{0, 0}, pc(7, 0), [2]blocker{blockedByCap, nb},
			[]capResult{full(2, 0, 2), full(3, 0, 3)}},
		// Interactive was left only to its caps: bulk still borrows (10-3-7 = 0 beyond its own 2).
		{10 * time.Millisecond, [2][]int{nil, {A, 0, 0, 0}}, []int64{2, 3}, pc(0, 2), [2]blocker{nb, bw},
			[]capResult{full(0, 0, 2), room(0, 0, 3)}},
		// One request left in the window: the class, not the cap, stops the second.
		{20 * time.Millisecond, [2][]int{{A, A}, nil}, []int64{1, 3}, pc(1, 0), [2]blocker{bw, nb},
			[]capResult{room(1, 0, 2), room(0, 0, 3)}},
		{time.Second, [2][]int{{B, B, B, B}, nil}, []int64{2, 0}, pc(3, 0), [2]blocker{blockedByCap, nb},
			[]capResult{room(0, 0, 2), full(3, 0, 3)}},
		{time.Second + 10*time.Millisecond, [2][]int{{0, 0, 0, 0, 0, 0, 0, 0}, nil}, []int64{0, 0}, pc(7, 0), [2]blocker{bw, nb},
			[]capResult{room(0, 0, 0), room(0, 0, 0)}},
	}
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, windowLimits, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(st.at)
		req := takeRequest{Limits: windowLimits}
		for k, b := range capsUnder {
			req.Caps = append(req.Caps, poolCapTake{Name: []string{"a", "b"}[k], InFlight: st.held[k], Cap: b})
		}
		for c, list := range st.list {
			for _, k := range list {
				req.Waiters[c] = append(req.Waiters[c], queued{Cap: k})
			}
			req.Want[c] = int64(len(list))
		}
		res, err := s.Take(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker {
			t.Fatalf("step %d: granted %v blocked %v, want %v %v", i, res.Granted, res.Blocker, st.granted, st.blocker)
		}
		for k, want := range st.caps {
			if res.Caps[k] != want {
				t.Fatalf("step %d: cap %d answered %+v, want %+v", i, k, res.Caps[k], want)
			}
		}
		if blocked := res.Blocker != [2]blocker{}; blocked != (res.RetryAfter > 0) {
			t.Fatalf("step %d: RetryAfter %s with blockers %v", i, res.RetryAfter, res.Blocker)
		}
	}
}

// TestRedisCapReplicaExpiry: a replica that dies holding slots under a
// cap stops counting against it once its heartbeat expires.
func TestRedisCapReplicaExpiry(t *testing.T) {
	dead, live, advance := expiringPair(t)
	ctx := t.Context()
	capped := func(held int64, n int) takeRequest {
		req := takeRequest{Limits: windowLimits, Want: pc(int64(n), 0),
			Caps: []poolCapTake{{Name: "a", InFlight: held, Cap: capsUnder[0]}}}
		for range n {
			req.Waiters[0] = append(req.Waiters[0], queued{Cap: 1})
		}
		return req
	}
	if r, _ := dead.Take(ctx, capped(0, 2)); r.Granted != pc(2, 0) {
		t.Fatalf("dead replica got %v", r.Granted)
	}
	advance(2 * time.Second) // within 3 heartbeats: still counted
	if r, _ := live.Take(ctx, capped(0, 1)); r.Granted != pc(0, 0) || r.Caps[0].FleetInFlight != 2 {
		t.Fatalf("before expiry: live got %v, cap %+v; want nothing, 2 in flight", r.Granted, r.Caps[0])
	}
	advance(2 * time.Second) // 4 s of silence > 3 s TTL
	if r, _ := live.Take(ctx, capped(0, 2)); r.Granted != pc(2, 0) || r.Caps[0].FleetInFlight != 2 {
		t.Fatalf("after expiry: live got %v, cap %+v; want both", r.Granted, r.Caps[0])
	}
}
