package adaptive

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive/adaptivetest"
)

// The runs below step the controller every adaptiveInterval against
// simServer: 8 slots at 200 ms is a plateau of 40 completions a second.
const adaptiveInterval = 2 * time.Second

// knee8 is the knee server: 8 slots at 200 ms, 60 bulk workers.
func knee8(seed uint64) adaptivetest.Config {
	return adaptivetest.Config{Slots: 8, Service: 200 * time.Millisecond, Workers: 60, Seed: seed}
}

// TestAdaptiveConvergence: from the floor, within 25 s the bound sits in
// [8, 16] and the server does ≥ 85% of its plateau, and both hold for the
// next 60 s — with a fixed service time and with lognormal output lengths.
func TestAdaptiveConvergence(t *testing.T) {
	heavy := knee8(7)
	heavy.Tail, heavy.Tokens = 1, true
	for name, cfg := range map[string]adaptivetest.Config{"fixed": knee8(1), "lognormal": heavy} {
		t.Run(name, func(t *testing.T) {
			steps := simulate(adaptivetest.NewServer(cfg), Limits{Ceiling: 200}, State{}, adaptiveInterval, 85*time.Second, nil)
			w := during(steps, 25*time.Second, 85*time.Second)
			lo, hi := boundRange(w)
			got := throughput(w)
			t.Logf("bound %d..%d after 25 s, %.1f/s of 40", lo, hi, got)
			if lo < 8 || hi > 16 || got < 34 {
				t.Errorf("after 25 s: bound %d..%d, want within [8, 16]; %.1f/s, want ≥ 34\n%s", lo, hi, got, summary(steps, adaptiveInterval))
			}
		})
	}
}

// TestAdaptiveStepChange: a 16-slot server drops to 4 slots, and 60 s
// later goes back to 16; the changes land at every phase of the probe
// cycle (offsets 0–18 s). Within 30 s of the drop the bound is ≤ 8 and
// stays there, doing ≥ 17/s of 20; within 30 s of the rise it is ≥ 14 and
// stays there, doing ≥ 68/s of 80.
func TestAdaptiveStepChange(t *testing.T) {
	for off := time.Duration(0); off < 20*time.Second; off += 2 * time.Second {
		drop, rise := 40*time.Second+off, 100*time.Second+off
		srv := adaptivetest.NewServer(adaptivetest.Config{Slots: 16, Service: 200 * time.Millisecond, Workers: 60, Seed: 3})
		steps := simulate(srv, Limits{Ceiling: 200}, State{}, adaptiveInterval, rise+60*time.Second, func(now time.Duration) {
			switch now {
			case drop:
				srv.Slots = 4
			case rise:
				srv.Slots = 16
			}
		})
		down := during(steps, drop+30*time.Second, rise)
		up := during(steps, rise+30*time.Second, rise+60*time.Second)
		_, downHi := boundRange(down)
		upLo, _ := boundRange(up)
		t.Logf("offset %2.0f s: bound %d after the drop (%.1f/s), %d after the rise (%.1f/s)",
			off.Seconds(), downHi, throughput(down), upLo, throughput(up))
		if downHi > 8 || throughput(down) < 17 || upLo < 14 || throughput(up) < 68 {
			t.Errorf("offset %v: from 30 s after the drop bound up to %d (want ≤ 8), %.1f/s (want ≥ 17); "+
				"from 30 s after the rise bound down to %d (want ≥ 14), %.1f/s (want ≥ 68)\n%s",
				off, downHi, throughput(down), upLo, throughput(up), summary(steps, adaptiveInterval))
		}
	}
}

// TestAdaptiveHostedRate: a hosted provider (2 s flat, no knee) behind a
// 20/s rate window with 80 workers. The bound grows until the window binds
// — in flight then stays under the bound, the intervals are not saturated
// and the controller holds — with no 429 needed to stop it.
func TestAdaptiveHostedRate(t *testing.T) {
	cfg := adaptivetest.Config{Service: 2 * time.Second, Workers: 80, Rate: 20, Seed: 1}
	steps := simulate(adaptivetest.NewServer(cfg), Limits{Ceiling: 200}, State{}, adaptiveInterval, 180*time.Second, nil)
	late := during(steps, 90*time.Second, 180*time.Second)
	lo, hi := boundRange(late)
	got := throughput(late)
	t.Logf("after 90 s: bound %d..%d, %.1f/s", lo, hi, got)
	if got < 15 || hi >= 200 || lo != hi {
		t.Errorf("after 90 s: %.1f/s, want ≥ 15; bound %d..%d, want one bound under the ceiling\n%s", got, lo, hi, summary(steps, 10*time.Second))
	}
	for _, s := range steps {
		if s.Decision.Action == ActBackOff {
			t.Errorf("%v: backed off with no 429 from the model", s.At)
		}
	}
}

// TestAdaptiveNoise: heavy-tailed output lengths (lognormal, σ 1: CV 1.3;
// σ 1.5: CV 2.9) at a fixed knee of 8 for 10 minutes, five seeds each: the
// bound never passes 3× the knee nor reaches the ceiling, and throughput
// stays near the plateau. Without token counts latency per completion is
// as noisy as completions are, and at σ 1.5 the controller errs low.
func TestAdaptiveNoise(t *testing.T) {
	cases := []struct {
		tail    float64
		tokens  bool
		minRate float64 // completions a second, of 40
	}{
		{1, true, 37}, {1, false, 34}, {1.5, true, 36}, {1.5, false, 24},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("sigma%.1f/tokens=%v", c.tail, c.tokens), func(t *testing.T) {
			for seed := uint64(1); seed <= 5; seed++ {
				cfg := knee8(seed)
				cfg.Tail, cfg.Tokens = c.tail, c.tokens
				steps := simulate(adaptivetest.NewServer(cfg), Limits{Ceiling: 200}, State{}, adaptiveInterval, 10*time.Minute, nil)
				_, hi := boundRange(steps)
				got := throughput(during(steps, 30*time.Second, 10*time.Minute))
				t.Logf("seed %d: bound up to %d, %.1f/s", seed, hi, got)
				if hi > 24 || got < c.minRate {
					t.Errorf("seed %d: bound up to %d, want ≤ 24; %.1f/s, want ≥ %.0f\n%s", seed, hi, got, c.minRate, summary(steps, 20*time.Second))
				}
			}
		})
	}
}

// TestAdaptiveSteadyTimeouts: a share of requests hang until a 1 s
// timeout (Netflix concurrency-limits #137: Gradient2 grew to its maximum
// on these). Timeouts are neither work nor latency here, so they cannot
// make the bound grow. At 1.5%, under the back-off threshold, the bound
// stays at the knee (a chance cluster backs it off now and then); at 5% it
// backs off, at most once a cooldown, towards the floor.
func TestAdaptiveSteadyTimeouts(t *testing.T) {
	for _, c := range []struct {
		hang     float64
		lo, hi   int
		backOffs int // at most
	}{{0.015, 6, 12, 10}, {0.05, 4, 12, 60}} {
		cfg := knee8(5)
		cfg.Hang, cfg.Timeout = c.hang, time.Second
		steps := simulate(adaptivetest.NewServer(cfg), Limits{Ceiling: 200}, State{}, adaptiveInterval, 10*time.Minute, nil)
		lo, hi := boundRange(during(steps, 30*time.Second, 10*time.Minute))
		backOffs := 0
		for _, s := range steps {
			if s.Decision.Action == ActBackOff {
				backOffs++
			}
		}
		t.Logf("%.1f%% timeouts: bound %d..%d after 30 s, %d back-offs, %.1f/s", 100*c.hang, lo, hi, backOffs, throughput(steps))
		if lo < c.lo || hi > c.hi || backOffs > c.backOffs || c.hang > failShare && backOffs == 0 {
			t.Errorf("%.1f%% timeouts: bound %d..%d, want within [%d, %d]; %d back-offs, want some, at most %d\n%s",
				100*c.hang, lo, hi, c.lo, c.hi, backOffs, c.backOffs, summary(steps, 20*time.Second))
		}
	}
}

// TestAdaptiveThrottleBurst: a 6 s burst of 429s (30% of admissions) at a
// settled bound cuts it by about half, and it does not grow again for the
// cooldown after the burst.
func TestAdaptiveThrottleBurst(t *testing.T) {
	srv := adaptivetest.NewServer(adaptivetest.Config{Slots: 16, Service: 200 * time.Millisecond, Workers: 60, Seed: 2})
	burst := [2]time.Duration{60 * time.Second, 66 * time.Second}
	steps := simulate(srv, Limits{Ceiling: 200}, State{}, adaptiveInterval, 90*time.Second, func(now time.Duration) {
		srv.Throttle = 0
		if now >= burst[0] && now < burst[1] {
			srv.Throttle = 0.3
		}
	})
	before := during(steps, burst[0]-adaptiveInterval, burst[0])[0].Bound
	after := during(steps, burst[1]-adaptiveInterval, burst[1])[0].Accepted
	_, regrown := boundRange(during(steps, burst[1], burst[1]+cooldown))
	t.Logf("bound %d before the burst, %d after it, up to %d in the cooldown", before, after, regrown)
	if before < 14 || after > before*6/10 || after < before/3 || regrown > after {
		t.Errorf("bound %d before (want ≥ 14), %d after (want 33–60%% of it), up to %d in the cooldown (want none above it)\n%s",
			before, after, regrown, summary(steps, adaptiveInterval))
	}
}

// TestAdaptiveDemandLimited: 3 workers under a bound of 50 never saturate
// it, so the bound says nothing and does not move.
func TestAdaptiveDemandLimited(t *testing.T) {
	st := State{Bound: 50, Accepted: 50, cycle: cycle{Phase: PhaseHold, Step: 6}}
	steps := simulate(adaptivetest.NewServer(adaptivetest.Config{Slots: 8, Service: 200 * time.Millisecond, Workers: 3, Seed: 1}),
		Limits{Ceiling: 200}, st, adaptiveInterval, 5*time.Minute, nil)
	for _, s := range steps {
		if s.Bound != 50 || s.Decision.Action != ActHold || s.Decision.Why != "bound not binding" {
			t.Fatalf("%v: bound %d, %s (%s); want 50 held, not binding", s.At, s.Bound, s.Decision.Action, s.Decision.Why)
		}
	}
}

// TestAdaptiveStateJSON: every state of a run with probes, a step change
// and a burst round-trips through encoding/json unchanged, and the decoded
// state steps exactly as the original — the fleet keeps it in Redis.
func TestAdaptiveStateJSON(t *testing.T) {
	lim := Limits{Floor: 2, Ceiling: 64}
	srv := adaptivetest.NewServer(adaptivetest.Config{Slots: 16, Service: 300 * time.Millisecond, Workers: 60, Tail: 1, Tokens: true, Seed: 9})
	st, phases := State{}, map[Phase]bool{}
	for srv.Now() < 3*time.Minute {
		srv.Slots = 16 - 12*int(srv.Now()/time.Minute%2)
		srv.Throttle = 0
		if srv.Now() >= 150*time.Second && srv.Now() < 152*time.Second {
			srv.Throttle = 0.3
		}
		m := Sample(srv.Run(max(st.Bound, lim.initial().Bound), adaptiveInterval))
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, st) {
			t.Fatalf("round trip changed the state:\n%+v\n%+v", st, back)
		}
		want, wantD := lim.Next(st, m)
		got, gotD := lim.Next(back, m)
		if !reflect.DeepEqual(got, want) || gotD != wantD {
			t.Fatalf("decoded state stepped differently: %+v %+v, want %+v %+v", got, gotD, want, wantD)
		}
		st, phases[st.Phase] = want, true
	}
	for _, p := range []Phase{PhaseStart, PhaseGrow, PhaseHold, PhaseUp, PhaseDown} {
		if !phases[p] {
			t.Errorf("the run never was in phase %q; the round trip did not cover it", p)
		}
	}
}

// TestAdaptiveRules: the judgements one at a time, against the model
// work = c·min(L, K) with latency per work flat below K and ∝ L/K above.
func TestAdaptiveRules(t *testing.T) {
	rate := func(bound int, work, lat float64) Rate {
		return Rate{Bound: bound, Work: work, Latency: lat}
	}
	for _, c := range []struct {
		name            string
		base, r         Rate
		gained, relieve bool
		knee            int
	}{
		{"below the knee: work ∝ bound, latency flat", rate(4, 20, 1), rate(8, 40, 1), true, false, 7},
		{"knee halfway: half the gain", rate(8, 40, 1), rate(16, 60, 1.33), true, false, 12},
		{"knee at base: flat work, latency ∝ bound", rate(8, 40, 1), rate(16, 40, 2), false, false, 8},
		{"noise: work up 20% but latency ∝ bound", rate(8, 40, 1), rate(9, 48, 1.125), false, false, 8},
		{"a step down above the knee: work kept, latency falls", rate(16, 40, 2), rate(14, 40, 1.75), false, true, 16},
		{"a step down at the knee: work lost", rate(8, 40, 1), rate(7, 35, 1), false, false, 8},
		{"a step down at the knee, noise keeps work: latency flat", rate(8, 40, 1), rate(7, 40, 1), false, false, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.r.Bound > c.base.Bound {
				if got := c.r.gained(c.base); got != c.gained {
					t.Errorf("gained = %v, want %v", got, c.gained)
				}
				if got := c.r.kneeBetween(c.base); got != c.knee {
					t.Errorf("kneeBetween = %d, want %d", got, c.knee)
				}
			} else if got := c.r.relieved(c.base); got != c.relieve {
				t.Errorf("relieved = %v, want %v", got, c.relieve)
			}
		})
	}
	for _, c := range []struct {
		m    Sample
		left time.Duration
		want string
	}{
		{Sample{Completed: 78, Throttled: 2}, cooldown, "upstream 429s"},
		{Sample{Completed: 79, Throttled: 1}, 0, ""},
		{Sample{Completed: 78, Failures: 2}, 0, ""}, // chance at 2%
		{Sample{Completed: 74, Failures: 6}, 0, "upstream 5xx or timeouts"},
		{Sample{Completed: 74, Failures: 6}, time.Second, ""}, // once a cooldown
		{Sample{Failures: 3}, 0, "upstream 5xx or timeouts"},  // everything failing
	} {
		if got := failing(c.m, c.left); got != c.want {
			t.Errorf("failing(%+v, %v) = %q, want %q", c.m, c.left, got, c.want)
		}
	}
}

// TestAdaptiveStart: the zero state starts at the floor (4 unless
// configured, never above the ceiling), samples for another bound are not
// judged, and a lowered ceiling takes effect at the next step.
func TestAdaptiveStart(t *testing.T) {
	full := Sample{Saturated: true, Completed: 100, Elapsed: adaptiveInterval, Latency: 20 * time.Second}
	for _, c := range []struct {
		lim  Limits
		want int
	}{{Limits{Ceiling: 200}, 4}, {Limits{Floor: 10, Ceiling: 200}, 10}, {Limits{Ceiling: 2}, 2}} {
		m := full
		m.Bound = c.want
		st, d := c.lim.Next(State{}, m)
		if st.Bound != c.want || st.Phase != PhaseGrow || d.Action != ActHold || d.Why != "warming up" {
			t.Errorf("%+v: first step %+v %+v, want bound %d warming up in slow start", c.lim, st, d, c.want)
		}
	}
	lim := Limits{Ceiling: 64}
	st := State{Bound: 32, Accepted: 32, cycle: cycle{Phase: PhaseHold, Step: 4}}
	m := full
	m.Bound = 16
	if got, d := lim.Next(st, m); !reflect.DeepEqual(got, st) || d.Why != "sample for another bound" {
		t.Errorf("a sample for bound 16 moved the state of bound 32: %+v %+v", got, d)
	}
	lim.Ceiling = 20
	m.Bound = 32
	if got, _ := lim.Next(st, m); got.Bound != 20 || got.Accepted != 20 {
		t.Errorf("ceiling lowered to 20: bound %d accepted %d", got.Bound, got.Accepted)
	}
	if (Decision{From: 16, To: 12}).Large() != true || (Decision{From: 16, To: 15}).Large() {
		t.Error("large: a quarter of the bound is large, one in 16 is not")
	}
}

// knee16 is the step-change server: 16 slots at 200 ms, 60 bulk workers.
func knee16() adaptivetest.Config {
	return adaptivetest.Config{Slots: 16, Service: 200 * time.Millisecond, Workers: 60, Seed: 3}
}

// firstDecision is when the first decision act was taken after from, or
// -1 when none was.
func firstDecision(steps []simStep, act Action, from time.Duration) time.Duration {
	for _, s := range steps {
		if s.At > from && s.Decision.Action == act {
			return s.At
		}
	}
	return -1
}

// firstJudged is the first step after from that judged a measurement.
func firstJudged(steps []simStep, from time.Duration) simStep {
	for _, s := range steps {
		if s.At > from && s.Decision.Judged.Bound != 0 {
			return s
		}
	}
	return simStep{}
}

// TestAdaptiveStepChangePhases times the knee's move at the moments the
// offsets of TestAdaptiveStepChange reach only by chance, each one a way
// the end-to-end test saw the bound fail to follow:
//
//   - the drop lands in a probe up (its warm-up, or its measurement): the
//     probe's own judgement sees the server slowed and must act on it,
//     not revert and confirm at the accepted bound first — on the real
//     proxy a measurement takes 2–4 intervals, so each wasted one costs
//     5–10 s of the 30 s;
//   - the drop lands right after settle, before the settled bound was
//     measured (slow start from 6 puts the knee between two doublings, 12
//     and 24, as the proxy's interactive reserve does): the slowed server
//     must not become the reference;
//   - capacity comes back while a step down is measured at 4 slots: the
//     faster server must not make the step down look good, and the bound
//     must climb back within 30 s.
func TestAdaptiveStepChangePhases(t *testing.T) {
	lim := Limits{Ceiling: 200}
	plain := simulate(adaptivetest.NewServer(knee16()), lim, State{}, adaptiveInterval, 60*time.Second, nil)
	probe := firstDecision(plain, ActProbeUp, 30*time.Second)
	fromSix := State{Bound: 6, Accepted: 6, cycle: cycle{Phase: PhaseGrow, Step: 1}}
	settled := firstDecision(simulate(adaptivetest.NewServer(knee16()), lim, fromSix, adaptiveInterval, 60*time.Second, nil), ActSettle, 0)
	if probe < 0 || settled < 0 {
		t.Fatalf("no probe up after 30 s (%v) or no settle (%v) at 16 slots", probe, settled)
	}
	for _, c := range []struct {
		name  string
		start State
		drop  time.Duration
		quick bool // the first judgement after the drop must bring the bound down
	}{
		{"drop in a probe's warm-up", State{}, probe, true},
		{"drop in a probe's measurement", State{}, probe + adaptiveInterval, true},
		{"drop right after settle", fromSix, settled, false},
		{"drop one interval after settle", fromSix, settled + adaptiveInterval, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := adaptivetest.NewServer(knee16())
			steps := simulate(srv, lim, c.start, adaptiveInterval, c.drop+60*time.Second, func(now time.Duration) {
				if now == c.drop {
					srv.Slots = 4
				}
			})
			first := firstJudged(steps, c.drop+adaptiveInterval)
			down := during(steps, c.drop+30*time.Second, c.drop+60*time.Second)
			_, hi := boundRange(down)
			t.Logf("drop at %v: first judgement %v→%d (%s); from 30 s after: bound up to %d, %.1f/s",
				c.drop, first.Decision.Action, first.Decision.To, first.Decision.Why, hi, throughput(down))
			if c.quick && first.Decision.To > 8 {
				t.Errorf("the first judgement after the drop left the bound at %d (%s: %s), want ≤ 8",
					first.Decision.To, first.Decision.Action, first.Decision.Why)
			}
			if hi > 8 || throughput(down) < 17 {
				t.Errorf("from 30 s after the drop: bound up to %d (want ≤ 8), %.1f/s (want ≥ 17)\n%s",
					hi, throughput(down), summary(steps, adaptiveInterval))
			}
		})
	}
	for _, c := range []struct {
		name   string
		tail   float64
		tokens bool
		seeds  uint64
		// bulk is the proxy's default class partition: bulk, which
		// probes, never holds interactive's reserve, and holds 5 at
		// both 6 and 7.
		bulk BulkPart
	}{{"fixed", 0, false, 1, BulkPart{}}, {"lognormal", 1, true, 5, BulkPart{}},
		{"interactive reserve", 0, false, 1, BulkPart{Share: 0.2, Reserve: 0.3, Borrow: true}}} {
		t.Run("rise during a probe down/"+c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= c.seeds; seed++ {
				// The state a drop from 16 to 4 slots leaves: the latency
				// rise put the bound at 5, a probe up gained nothing, and
				// a step down to 4 is being tried, judged against 5's
				// measurement (in tokens when the server reports them).
				cfg := knee16()
				cfg.Slots, cfg.Tail, cfg.Tokens, cfg.Seed, cfg.Bulk = 4, c.tail, c.tokens, seed, Limits{Bulk: c.bulk}.bulk
				srv := adaptivetest.NewServer(cfg)
				for range 5 {
					srv.Run(5, adaptiveInterval)
				}
				unit := 1.0
				if c.tokens {
					unit = adaptivetest.MeanTokens
				}
				st := State{Bound: 4, Accepted: 5, cycle: cycle{Phase: PhaseDown, Step: 1},
					memory: memory{Base: Rate{Bound: 5, Work: 20 * unit, Latency: 0.25 / unit},
						Ref: 0.225 / unit, MinLatency: 0.2 / unit, Peak: 20 * unit}}
				rise := srv.Now()
				srv.Slots = 16
				steps := simulate(srv, Limits{Ceiling: 200, Bulk: c.bulk}, st, adaptiveInterval, rise+60*time.Second, nil)
				early := during(steps, rise+22*time.Second, rise+28*time.Second)
				up := during(steps, rise+30*time.Second, rise+60*time.Second)
				lo, _ := boundRange(up)
				t.Logf("seed %d: 22–28 s after the rise %.1f/s; from 30 s after: bound down to %d, %.1f/s",
					seed, throughput(early), lo, throughput(up))
				if lo < 14 || throughput(up) < 68 {
					t.Errorf("seed %d: from 30 s after the rise: bound down to %d (want ≥ 14), %.1f/s (want ≥ 68)\n%s",
						seed, lo, throughput(up), summary(steps, adaptiveInterval))
				}
			}
		})
	}
}

// TestAdaptiveDropSettles: after the knee drops from 16 slots to 4 under
// the proxy's default class partition, the bound settles where bulk fills
// the 4 slots without probing below them: from 20 s after the drop, at
// every offset of the drop in the probe cycle, no bound at which bulk
// holds fewer than 4, and ≥ 19.5 completions a second of 20. Each probe
// below the knee costs a quarter of the work for a warm-up and a
// measurement, which on the real proxy is 4–10 s (issue 24's e2e measured
// 17/s over the 10 s after 30 s when the cycle probed up first and then
// stepped down to the floor).
func TestAdaptiveDropSettles(t *testing.T) {
	part := BulkPart{Share: 0.2, Reserve: 0.3, Borrow: true}
	lim := Limits{Ceiling: 200, Bulk: part}
	for off := time.Duration(0); off < 20*time.Second; off += 2 * time.Second {
		drop := 40*time.Second + off
		cfg := knee16()
		cfg.Bulk = Limits{Bulk: part}.bulk
		srv := adaptivetest.NewServer(cfg)
		steps := simulate(srv, lim, State{}, adaptiveInterval, drop+60*time.Second, func(now time.Duration) {
			if now == drop {
				srv.Slots = 4
			}
		})
		after := during(steps, drop+20*time.Second, drop+60*time.Second)
		lo, hi := boundRange(after)
		t.Logf("offset %2.0f s: from 20 s after the drop bound %d..%d (bulk %d..%d), %.1f/s",
			off.Seconds(), lo, hi, lim.bulk(lo), lim.bulk(hi), throughput(after))
		if lim.bulk(lo) < 4 || throughput(after) < 19.5 {
			t.Errorf("offset %v: from 20 s after the drop bound down to %d (bulk %d, want ≥ 4), %.1f/s (want ≥ 19.5)\n%s",
				off, lo, lim.bulk(lo), throughput(after), summary(steps, adaptiveInterval))
		}
	}
}

// TestAdaptiveGrowthNoise: slow start judges a doubling by work first. The
// e2e knee test measured, on a busy machine, a doubling 8 → 16 below a
// 16-slot knee that did 1.85× the work at 11% more latency per work (the
// proxy's own time): that is no knee, and growth goes on (it settled at 14
// before, and 30 s after the knee rose again the bound was still there:
// 50/s of 80). A doubling whose work grew half as much, with latency per
// work up by a third, still settles at the knee between.
func TestAdaptiveGrowthNoise(t *testing.T) {
	lim := Limits{Ceiling: 200}
	grow := State{Bound: 16, Accepted: 8, cycle: cycle{Phase: PhaseGrow, Step: 1},
		memory: memory{Base: Rate{Bound: 8, Work: 259, Latency: 0.0231}, Ref: 0.0228, MinLatency: 0.0225, Peak: 259}}
	for _, c := range []struct {
		name   string
		got    Rate
		action Action
		bound  int
	}{
		{"work grew with the bound, latency noisy", Rate{Bound: 16, Work: 479.7, Latency: 0.0257}, ActGrow, 32},
		{"knee halfway", Rate{Bound: 16, Work: 388, Latency: 0.0304}, ActSettle, 12},
	} {
		s, act, why := lim.judge(grow, c.got)
		if act != c.action || s.Bound != c.bound {
			t.Errorf("%s: %s to %d (%s), want %s to %d", c.name, act, s.Bound, why, c.action, c.bound)
		}
	}
}
