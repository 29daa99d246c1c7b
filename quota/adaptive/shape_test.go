package adaptive

import (
	"fmt"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/adaptive/adaptivetest"
)

// The shapes of issue 32, simulated: a shift of the request mix at a knee,
// and a hosted provider whose rate binds at latencies of seconds.

// TestAdaptiveMixShift: twenty workers of another caller asking
// max_tokens: 1 join the knee workload (8 slots at 200 ms, 60 workers,
// token counts reported) at 40 s, and leave at 100 s; fair queuing gives
// them every other slot. Latency has a part per request and a part per
// token — all per request, as test/fakeprovider's; half and half; a fifth
// per request — so latency per token rises by half or more with no less
// work done, under the proxy's default class partition. The bound must not
// be cut for it — no latency rise acted on, the knee never moved — and in
// every 10 s from the join on the server's capacity used stays at 75% or
// more (issue 32: cut 11 → 4, 16 completions a second of 40 for 30 s).
func TestAdaptiveMixShift(t *testing.T) {
	part := BulkPart{Share: 0.2, Reserve: 0.3, Borrow: true} // the proxy's default
	lim := Limits{Ceiling: 200, Bulk: part}
	for _, fixed := range []float64{1, 0.5, 0.2} {
		t.Run(fmt.Sprintf("fixed %.1f", fixed), func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				cfg := knee8(seed)
				cfg.Tokens, cfg.Fixed, cfg.Tail, cfg.Bulk = true, fixed, 0.5, lim.bulk
				srv := adaptivetest.NewServer(cfg)
				join, leave := 40*time.Second, 100*time.Second
				steps := simulate(srv, lim, State{}, adaptiveInterval, leave+60*time.Second, func(now time.Duration) {
					switch now {
					case join:
						srv.Short = 20
					case leave:
						srv.Short = 0
					}
				})
				lo, _ := boundRange(during(steps, join, leave+60*time.Second))
				if at := firstDecision(steps, ActLatencyRise, join); at >= 0 {
					t.Errorf("seed %d: the bound was cut for a latency rise at %v, with the knee where it was\n%s",
						seed, at, summary(steps, adaptiveInterval))
				}
				for from := join; from < leave+60*time.Second; from += 10 * time.Second {
					if used := meanUsed(during(steps, from, from+10*time.Second)); used < 0.75 {
						t.Errorf("seed %d: %v–%v after the start: %.0f%% of the server's capacity used, want ≥ 75%%\n%s",
							seed, from, from+10*time.Second, 100*used, summary(steps, adaptiveInterval))
						break
					}
				}
				t.Logf("seed %d: bound down to %d after the join, capacity used %.0f%% before it, %.0f%% while the short callers stayed, %.0f%% after",
					seed, lo, 100*meanUsed(during(steps, 20*time.Second, join)), 100*meanUsed(during(steps, join, leave)),
					100*meanUsed(during(steps, leave, leave+60*time.Second)))
			}
		})
	}
}

// meanUsed is the mean share of the server's capacity used over steps.
func meanUsed(steps []simStep) float64 {
	sum := 0.0
	for _, s := range steps {
		sum += s.Used
	}
	return sum / float64(max(len(steps), 1))
}

// TestAdaptiveHostedShape: the hosted shape of test/'s
// TestAdaptiveBoundHostedShape, simulated at the latencies hosted models
// have — a provider without a knee answering every request in 2 s or 8 s,
// 20 requests a second, classes as users write them (interactive {share
// 0.5, reserve r}, bulk {share 0.5, borrow}: bulk gets 20 × (1 − r) a
// second), closed-loop bulk workers — at the default reserve and at 0.2.
// The bound grows from the floor until the rate or the workers, not the
// bound, limit bulk: within a deadline bulk may hold 80% of what the rate
// leaves it, and from then on does that much, with no back-off. At 8 s a
// request 80 workers do at most 10 a second, below the rate; 160 do not.
// (On the controller before issue 32, 8 s took over 90 s to get there.)
func TestAdaptiveHostedShape(t *testing.T) {
	for _, c := range []struct {
		latency  time.Duration
		workers  int
		reserve  float64
		deadline time.Duration
	}{
		{2 * time.Second, 80, 0.3, 30 * time.Second},
		{2 * time.Second, 80, 0.2, 30 * time.Second},
		{8 * time.Second, 80, 0.3, 90 * time.Second},
		{8 * time.Second, 80, 0.2, 90 * time.Second},
		{8 * time.Second, 160, 0.3, 90 * time.Second},
		{8 * time.Second, 160, 0.2, 90 * time.Second},
	} {
		t.Run(fmt.Sprintf("%v/%d workers/reserve %.1f", c.latency, c.workers, c.reserve), func(t *testing.T) {
			part := BulkPart{Share: 0.5, Reserve: c.reserve, Borrow: true}
			lim := Limits{Ceiling: 200, Bulk: part}
			rate := int(20*(1-c.reserve) + 0.5)
			want := 0.8 * min(float64(rate), float64(c.workers)/c.latency.Seconds())
			for seed := uint64(1); seed <= 3; seed++ {
				// Seed 1 answers every request in the latency; the others
				// vary it with the output length (lognormal σ 0.5).
				srv := adaptivetest.NewServer(adaptivetest.Config{Service: c.latency, Workers: c.workers, Rate: rate, Seed: seed, Bulk: Limits{Bulk: part}.bulk,
					Tail: 0.5 * float64(min(seed-1, 1)), Tokens: seed > 1})
				steps := simulate(srv, lim, State{}, adaptiveInterval, 5*time.Minute, nil)
				reached := time.Duration(-1)
				for _, s := range steps {
					if float64(lim.bulk(s.Bound))/c.latency.Seconds() >= want {
						reached = s.At
						break
					}
				}
				after := during(steps, reached, 5*time.Minute)
				t.Logf("seed %d: bound where bulk may do %.1f a second (80%% of %.1f) after %v; from then %.1f a second",
					seed, want, want/0.8, reached, throughput(after))
				if reached < 0 || reached > c.deadline || throughput(after) < want {
					t.Errorf("seed %d: bulk's bound reached %.1f a second after %v (want within %v), then did %.1f a second (want ≥ %.1f)\n%s",
						seed, want, reached, c.deadline, throughput(after), want, summary(steps, 4*time.Second))
				}
				if at := firstDecision(steps, ActBackOff, 0); at >= 0 {
					t.Errorf("seed %d: backed off at %v with no 429 from the provider", seed, at)
				}
			}
		})
	}
}
