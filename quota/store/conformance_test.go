package store

import (
	"context"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// newStoreFunc builds a Store enforcing l, whose windows follow now.
type newStoreFunc func(t *testing.T, l Limits, now func() time.Time) Store

// windowLimits: 10 requests a second for the account, 2 for bulk, 3
// reserved; in flight far from binding.
var windowLimits = Limits{AccountRPM: 600, BulkRPM: 120, ReserveRPM: 180, InFlight: 1000, BulkInFlight: 200, ReserveInFlight: 300, Borrow: true}

// inFlightLimits: 10 in flight, 2 for bulk, 3 reserved; windows far from
// binding.
var inFlightLimits = Limits{AccountRPM: 60000, BulkRPM: 12000, ReserveRPM: 18000, InFlight: 10, BulkInFlight: 2, ReserveInFlight: 3, Borrow: true}

const (
	nb = NotBlocked
	bw = BlockedByWindow
	bf = BlockedByInFlight
)

// pc builds a PerClass: interactive, bulk.
func pc(i, b int64) PerClass { return PerClass{i, b} }

// conformanceStep is one Take and what it must answer.
type conformanceStep struct {
	at      time.Duration // since the start of a second
	want    PerClass
	held    PerClass
	granted PerClass
	blocker [classify.NumClasses]Blocker
}

// runStoreConformance is the behaviour every Store must have: the rules of
// docs/rules.md for windows, partition, borrowing, reserve and in flight.
func runStoreConformance(t *testing.T, newStore newStoreFunc) {
	noBorrow := windowLimits
	noBorrow.Borrow = false
	tests := []struct {
		name   string
		limits Limits
		steps  []conformanceStep
	}{
		{"interactive takes the whole window", windowLimits, []conformanceStep{
			{0, pc(15, 0), pc(0, 0), pc(10, 0), [2]Blocker{bw, nb}},
			{time.Second, pc(5, 0), pc(10, 0), pc(5, 0), [2]Blocker{nb, nb}},
		}},
		{"bulk borrows up to the reserve, never into it", windowLimits, []conformanceStep{
			{0, pc(0, 20), pc(0, 0), pc(0, 7), [2]Blocker{nb, bw}},
			{10 * time.Millisecond, pc(5, 0), pc(0, 7), pc(3, 0), [2]Blocker{bw, nb}},
		}},
		{"interactive goes first in one call", windowLimits, []conformanceStep{
			{0, pc(5, 20), pc(0, 0), pc(5, 2), [2]Blocker{nb, bw}}, // 10 - 5 - reserve 3 = 2 for bulk
		}},
		{"bulk without borrowing keeps to its share", noBorrow, []conformanceStep{
			{0, pc(0, 20), pc(0, 0), pc(0, 2), [2]Blocker{nb, bw}},
			{0, pc(20, 0), pc(0, 2), pc(8, 0), [2]Blocker{bw, nb}},
		}},
		{"a waiting interactive request stops borrowing", windowLimits, []conformanceStep{
			{0, pc(12, 0), pc(0, 0), pc(10, 0), [2]Blocker{bw, nb}},
			{time.Second, pc(0, 20), pc(10, 0), pc(0, 2), [2]Blocker{nb, bw}}, // interactive still waits
			{time.Second + time.Millisecond, pc(2, 0), pc(10, 2), pc(2, 0), [2]Blocker{nb, nb}},
			{2 * time.Second, pc(0, 20), pc(12, 2), pc(0, 7), [2]Blocker{nb, bw}}, // served: borrowing resumes
		}},
		{"short interactive in the same call stops borrowing", windowLimits, []conformanceStep{
			{0, pc(12, 5), pc(0, 0), pc(10, 0), [2]Blocker{bw, bw}},
		}},
		{"windows reset every second", windowLimits, []conformanceStep{
			{0, pc(0, 7), pc(0, 0), pc(0, 7), [2]Blocker{nb, nb}},
			{999 * time.Millisecond, pc(0, 1), pc(0, 7), pc(0, 0), [2]Blocker{nb, bw}},
			{time.Second, pc(0, 7), pc(0, 7), pc(0, 7), [2]Blocker{nb, nb}},
		}},
		{"in flight: bulk borrows up to the in-flight reserve", inFlightLimits, []conformanceStep{
			{0, pc(0, 9), pc(0, 0), pc(0, 7), [2]Blocker{nb, bf}},
			{time.Second, pc(9, 0), pc(0, 7), pc(3, 0), [2]Blocker{bf, nb}},
			{2 * time.Second, pc(1, 0), pc(3, 7), pc(0, 0), [2]Blocker{bf, nb}},
			{2 * time.Second, pc(1, 0), pc(3, 6), pc(1, 0), [2]Blocker{nb, nb}}, // a bulk slot came back
		}},
		{"in flight: bulk keeps to its share while interactive waits", inFlightLimits, []conformanceStep{
			{0, pc(11, 0), pc(0, 0), pc(10, 0), [2]Blocker{bf, nb}},
			{time.Second, pc(0, 5), pc(2, 0), pc(0, 2), [2]Blocker{nb, bf}},     // 8 returned, but interactive was left waiting
			{2 * time.Second, pc(1, 5), pc(2, 2), pc(1, 2), [2]Blocker{nb, bf}}, // interactive served first: bulk borrows to 10-3
		}},
		{"released slots are free again", inFlightLimits, []conformanceStep{
			{0, pc(10, 0), pc(0, 0), pc(10, 0), [2]Blocker{nb, nb}},
			{time.Second, pc(10, 0), pc(6, 0), pc(4, 0), [2]Blocker{bf, nb}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, newStore, tt.limits, tt.steps)
		})
	}
}

func runSteps(t *testing.T, newStore newStoreFunc, l Limits, steps []conformanceStep) {
	t.Helper()
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, l, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(st.at)
		res, err := s.Take(context.Background(), TakeRequest{Want: st.want, InFlight: st.held, Limits: l})
		if err != nil {
			t.Fatalf("step %d: Take: %v", i, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker {
			t.Fatalf("step %d (want %v, held %v): granted %v blocked %v, want %v blocked %v",
				i, st.want, st.held, res.Granted, res.Blocker, st.granted, st.blocker)
		}
		blocked := res.Blocker != [2]Blocker{}
		if blocked != (res.RetryAfter > 0) || res.RetryAfter > time.Second {
			t.Fatalf("step %d: RetryAfter %s with blockers %v", i, res.RetryAfter, res.Blocker)
		}
		if wantFleet := pc(st.held[0]+res.Granted[0], st.held[1]+res.Granted[1]); res.FleetInFlight != wantFleet {
			t.Fatalf("step %d: fleet in flight %v, want %v", i, res.FleetInFlight, wantFleet)
		}
	}
}

// upstreamStep is one Take carrying an upstream report.
type upstreamStep struct {
	at      time.Duration
	report  *UpstreamReport
	want    PerClass
	granted PerClass
	blocker [classify.NumClasses]Blocker
	hold    time.Duration // remaining upstream hold after the call
}

// runUpstreamConformance: a clearly fresher upstream observation decides
// the reserve hold, observations of the same moment keep its latest end;
// a 429's hold is kept whatever fresher reports say; interactive is never
// held.
func runUpstreamConformance(t *testing.T, newStore newStoreFunc) {
	sec := time.Second
	steps := []upstreamStep{
		{0, &UpstreamReport{Hold: 2 * sec}, pc(1, 5), pc(1, 0), [2]Blocker{nb, BlockedByUpstream}, 2 * sec},
		{sec, nil, pc(0, 5), pc(0, 0), [2]Blocker{nb, BlockedByUpstream}, sec},
		{1500 * time.Millisecond, &UpstreamReport{}, pc(0, 5), pc(0, 5), [2]Blocker{nb, nb}, 0},                             // fresher, above the reserve: lifted
		{1600 * time.Millisecond, &UpstreamReport{Age: 2 * sec, Hold: 10 * sec}, pc(0, 1), pc(0, 1), [2]Blocker{nb, nb}, 0}, // older: ignored
		{2500 * time.Millisecond, &UpstreamReport{ThrottleFor: 3 * sec}, pc(2, 1), pc(2, 0), [2]Blocker{nb, BlockedByUpstream}, 3 * sec},
		{3 * sec, &UpstreamReport{}, pc(0, 1), pc(0, 0), [2]Blocker{nb, BlockedByUpstream}, 2500 * time.Millisecond}, // a 429 hold stays
		{5600 * time.Millisecond, nil, pc(0, 1), pc(0, 1), [2]Blocker{nb, nb}, 0},
		{7 * sec, &UpstreamReport{Hold: 3 * sec}, pc(0, 1), pc(0, 0), [2]Blocker{nb, BlockedByUpstream}, 3 * sec},
		// The same moment (500 ms later), a shorter hold: the later end stands.
		{7500 * time.Millisecond, &UpstreamReport{Hold: sec}, pc(0, 1), pc(0, 0), [2]Blocker{nb, BlockedByUpstream}, 2500 * time.Millisecond},
		// Clearly fresher and above the reserve: lifted.
		{8600 * time.Millisecond, &UpstreamReport{}, pc(0, 1), pc(0, 1), [2]Blocker{nb, nb}, 0},
	}
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, windowLimits, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(st.at)
		res, err := s.Take(context.Background(), TakeRequest{Want: st.want, Upstream: st.report, Limits: windowLimits})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker || res.UpstreamHold != st.hold {
			t.Fatalf("step %d: granted %v blocked %v hold %s, want %v %v %s", i, res.Granted, res.Blocker, res.UpstreamHold, st.granted, st.blocker, st.hold)
		}
		if st.hold > 0 && res.RetryAfter != st.hold {
			t.Fatalf("step %d: RetryAfter %s, want the hold %s", i, res.RetryAfter, st.hold)
		}
	}
}

// tokenLimits: requests and in flight far from binding; 10 tokens a second
// for the account, 2 for bulk, 3 reserved.
var tokenLimits = Limits{AccountRPM: 600000, BulkRPM: 120000, ReserveRPM: 180000, InFlight: 1000, BulkInFlight: 200, ReserveInFlight: 300,
	Borrow: true, AccountTPM: 600, BulkTPM: 120, ReserveTPM: 180}

// runTokenConformance: with tokens_per_minute, each class's token
// estimates are charged to the window by the same partition rules, one
// request may overshoot, and corrections settle the charge — a charge
// settled down is room, even below zero, up to one second's allowance.
func runTokenConformance(t *testing.T, newStore newStoreFunc) {
	type step struct {
		at      time.Duration
		want    PerClass
		costs   [2][]int64
		corr    PerClass
		granted PerClass
		blocker [2]Blocker
	}
	ms := time.Millisecond
	steps := []step{
		{0, pc(0, 3), [2][]int64{nil, {3, 3, 3}}, pc(0, 0), pc(0, 2), [2]Blocker{nb, bw}},                            // bulk borrows to 10-3 and takes only what fits
		{10 * ms, pc(0, 2), [2][]int64{nil, {1, 1}}, pc(0, 0), pc(0, 1), [2]Blocker{nb, bw}},                         // the last token before the reserve
		{20 * ms, pc(3, 0), [2][]int64{{1, 1, 2}, nil}, pc(0, 0), pc(3, 0), [2]Blocker{nb, nb}},                      // interactive takes the reserve; the last overshoots by 1
		{30 * ms, pc(1, 0), [2][]int64{{3}, nil}, pc(0, -5), pc(1, 0), [2]Blocker{nb, nb}},                           // bulk used 5 less: room again
		{time.Second, pc(0, 1), [2][]int64{nil, {50}}, pc(0, 0), pc(0, 1), [2]Blocker{nb, nb}},                       // bulk's first of a second goes, however large
		{time.Second + ms, pc(1, 1), [2][]int64{{1}, {1}}, pc(0, 0), pc(0, 0), [2]Blocker{bw, bw}},                   // and spends the second
		{3 * time.Second, pc(0, 3), [2][]int64{nil, {3, 3, 3}}, pc(0, -4), pc(0, 3), [2]Blocker{nb, nb}},             // settled down: 4 of credit, room 11
		{4 * time.Second, pc(0, 6), [2][]int64{nil, {3, 3, 3, 3, 3, 3}}, pc(0, -1000), pc(0, 5), [2]Blocker{nb, bw}}, // credit bounded by a second: room 17
		{4*time.Second + ms, pc(2, 0), [2][]int64{{3, 3}, nil}, pc(0, 0), pc(2, 0), [2]Blocker{nb, nb}},              // bulk's net 5, then interactive overshoots to 11
		{5 * time.Second, pc(0, 3), [2][]int64{nil, {3, 3, 1}}, pc(0, 0), pc(0, 2), [2]Blocker{nb, bw}},              // the 1 over is carried, bulk's: room 10-3-1 = 6
	}
	base := time.Unix(1_700_000_000, 0)
	var now time.Time
	s := newStore(t, tokenLimits, func() time.Time { return now })
	for i, st := range steps {
		now = base.Add(st.at)
		res, err := s.Take(context.Background(), TakeRequest{Want: st.want, Waiters: listed(st.costs), Corrections: st.corr, Limits: tokenLimits})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Granted != st.granted || res.Blocker != st.blocker {
			t.Fatalf("step %d: granted %v blocked %v, want %v %v", i, res.Granted, res.Blocker, st.granted, st.blocker)
		}
	}
}

// listed lists uncapped waiters with costs, per class.
func listed(costs [2][]int64) [2][]Queued {
	var out [2][]Queued
	for c, cs := range costs {
		for _, cost := range cs {
			out[c] = append(out[c], Queued{Cost: cost})
		}
	}
	return out
}

// TestStoreConformance runs every behaviour suite on both stores: the
// in-process one and Redis's take.lua, which must decide alike.
func TestStoreConformance(t *testing.T) {
	srv := redistest.Start(t)
	stores := []struct {
		name string
		new  newStoreFunc
	}{
		{"memory", func(_ *testing.T, _ Limits, now func() time.Time) Store { return NewMemory(now) }},
		{"redis", func(t *testing.T, _ Limits, now func() time.Time) Store {
			s := newTestRedisStore(t, srv, redistest.Prefix(t))
			s.clock = now
			return s
		}},
	}
	suites := []struct {
		name string
		run  func(*testing.T, newStoreFunc)
	}{
		{"partition", runStoreConformance}, {"upstream", runUpstreamConformance}, {"tokens", runTokenConformance},
		{"pools", runPoolConformance}, {"output", runOutputConformance}, {"carry", runCarryConformance},
	}
	for _, st := range stores {
		for _, su := range suites {
			t.Run(st.name+"/"+su.name, func(t *testing.T) { su.run(t, st.new) })
			if su.name == "pools" {
				continue
			}
			// Every rule holds the same in a model's pool (its own keys,
			// its own hash tag).
			t.Run(st.name+"/"+su.name+"/in a model pool", func(t *testing.T) {
				su.run(t, func(t *testing.T, l Limits, now func() time.Time) Store {
					return inPool{st.new(t, l, now), "gpt-4o"}
				})
			})
		}
	}
}

// inPool is a store whose every call is for the pool named pool.
type inPool struct {
	Store
	pool string
}

func (s inPool) Take(ctx context.Context, req TakeRequest) (TakeResult, error) {
	req.Pool = s.pool
	return s.Store.Take(ctx, req)
}
