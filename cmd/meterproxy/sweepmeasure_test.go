package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tt := range []struct {
		name     string
		sorted   []time.Duration
		p        int
		want     time.Duration
		wantNone bool
	}{
		{name: "none", sorted: nil, p: 50, wantNone: true},
		{name: "one", sorted: ms(7), p: 99, want: 7 * time.Millisecond},
		{name: "p50 of 1..100", sorted: ms(hundred...), p: 50, want: 50 * time.Millisecond},
		{name: "p99 of 1..100", sorted: ms(hundred...), p: 99, want: 99 * time.Millisecond},
		{name: "p50 of 1..10", sorted: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), p: 50, want: 5 * time.Millisecond},
		{name: "p99 of 1..10 is the largest", sorted: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), p: 99, want: 10 * time.Millisecond},
		{name: "p50 of an odd count is the middle", sorted: ms(1, 2, 900), p: 50, want: 2 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := percentile(tt.sorted, tt.p)
			if tt.wantNone {
				tt.want = 0
			}
			if got != tt.want {
				t.Errorf("percentile(%v, %d) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestKnee(t *testing.T) {
	steps := func(perMin ...float64) []step {
		out := make([]step, len(perMin))
		for i, v := range perMin {
			out[i] = step{concurrency: 1 << i, completionsPerMin: v}
		}
		return out
	}
	for _, tt := range []struct {
		name             string
		steps            []step
		wantAt, wantBest int
		wantOK           bool
	}{
		{"a plateau from the third", steps(600, 1200, 2380, 2410, 2400), 2, 3, true},
		{"exactly 95% counts", steps(600, 950, 1000), 1, 2, true},
		{"just under 95% does not", steps(600, 949, 1000), 2, 2, true},
		{"still growing: the last", steps(100, 200, 400), 2, 2, true},
		{"a fall past the knee", steps(500, 1000, 700), 1, 1, true},
		{"nothing completed", steps(0, 0), -1, -1, false},
		{"no steps", nil, -1, -1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			at, best, ok := knee(tt.steps)
			if at != tt.wantAt || best != tt.wantBest || ok != tt.wantOK {
				t.Errorf("knee = %d, %d, %v; want %d, %d, %v", at, best, ok, tt.wantAt, tt.wantBest, tt.wantOK)
			}
		})
	}
	t.Run("a cut-short step takes no part", func(t *testing.T) {
		s := steps(600, 1200, 5000)
		s[2].rateLimited = true
		if at, best, ok := knee(s); at != 1 || best != 1 || !ok {
			t.Errorf("knee = %d, %d, %v; want the 429 step ignored: 1, 1, true", at, best, ok)
		}
		s[1].interrupted = true
		if at, _, _ := knee(s); at != 0 {
			t.Errorf("knee at %d; want 0 with the interrupted step ignored too", at)
		}
	})
}

// TestMeasure: work is counted as each request's share of its time in
// flight inside the window; latencies are of requests sent inside it;
// errors by kind; an interrupted request is neither.
func TestMeasure(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ok := func(from, to float64, out int64) outcome {
		return outcome{start: at(from), end: at(to), usage: usage.Usage{Input: 10, Output: out}}
	}
	outs := []outcome{
		ok(-1, 1, 100), // warm-up round: half of it inside, latency not counted
		ok(1, 3, 100),  // whole
		ok(3, 5, 100),  // whole
		ok(9, 11, 100), // drained: half inside
		{start: at(5), end: at(5.5), kind: "500"},
		{start: at(5), end: at(6), kind: kindTimeout},
		{start: at(6), end: at(6), kind: "500"},
		{start: at(6), end: at(7), kind: kindCanceled},
	}
	s := measure(4, at(0), at(10), outs)
	if math.Abs(s.completionsPerMin-18) > 1e-9 { // 3 completions in 10 s
		t.Errorf("completions/min %v, want 18", s.completionsPerMin)
	}
	if math.Abs(s.outputTokensPerSec-30) > 1e-9 { // 300 tokens in 10 s
		t.Errorf("output tokens/s %v, want 30", s.outputTokensPerSec)
	}
	if s.p50 != 2*time.Second || s.p99 != 2*time.Second {
		t.Errorf("p50 %v p99 %v; want 2s each (the warm-up's is left out)", s.p50, s.p99)
	}
	if want := map[string]int{"500": 2, kindTimeout: 1}; len(s.errors) != 2 || s.errors["500"] != 2 || s.errors[kindTimeout] != 1 {
		t.Errorf("errors %v, want %v", s.errors, want)
	}
	if s.sent != 8 || s.answered != 4 || s.spent != (usage.Usage{Input: 40, Output: 400}) {
		t.Errorf("sent %d answered %d spent %+v; want 8, 4, 40 in + 400 out", s.sent, s.answered, s.spent)
	}
	if e := measure(1, at(0), at(0), nil); e.completionsPerMin != 0 || e.p50 != 0 {
		t.Errorf("an empty window measured %+v", e)
	}
}

func TestSweepLevels(t *testing.T) {
	for _, tt := range []struct {
		step       string
		start, max int
		want       []int
	}{
		{"1.5", 1, 64, []int{1, 2, 3, 5, 8, 12, 18, 27, 41, 62}},
		{"2", 2, 32, []int{2, 4, 8, 16, 32}},
		{"1.01", 1, 4, []int{1, 2, 3, 4}}, // a small factor still moves by one
		{"+4", 1, 10, []int{1, 5, 9}},
		{"2", 5, 5, []int{5}},
	} {
		r, err := parseStep(tt.step)
		if err != nil {
			t.Fatalf("parseStep(%q): %v", tt.step, err)
		}
		if got := sweepLevels(tt.start, tt.max, r); !slices.Equal(got, tt.want) {
			t.Errorf("levels %d..%d by %s = %v, want %v", tt.start, tt.max, tt.step, got, tt.want)
		}
	}
	for _, bad := range []string{"1", "0.5", "+0", "+x", "x2", "", "1e9"} {
		if _, err := parseStep(bad); err == nil {
			t.Errorf("parseStep(%q) accepted", bad)
		}
	}
}
