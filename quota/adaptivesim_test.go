package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// simConfig shapes simServer: a model server with a knee behind a proxy
// that admits closed-loop workers up to the bound.
type simConfig struct {
	Slots   int           // the knee; 0 for none (every request at full speed)
	Service time.Duration // a request's service time alone (the mean, with Tail)
	Workers int           // closed-loop demand, no think time
	Rate    int           // admissions a second the proxy's window allows; 0 for none
	// Tail is the σ of a lognormal output length (mean fixed); 0 makes
	// every request the same length.
	Tail float64
	// Tokens reports output tokens as work; false leaves Work 0, as a
	// server that reports no usage.
	Tokens bool
	// Fixed is the share of a request's service time, at the mean output
	// length, that does not depend on its length (the prompt, the batch's
	// overhead): 0 makes service time proportional to output tokens, 1
	// the same for every request, as test/fakeprovider's.
	Fixed float64
	// Hang is the share of requests that never finish and time out after
	// Timeout, holding their slot until then.
	Hang    float64
	Timeout time.Duration
	// Bulk is the class partition: the workers, all bulk, are admitted
	// up to adaptiveLimits.bulk of the bound, as the proxy admits bulk.
	// The controller under test must be given the same.
	Bulk bulkPart
	Seed uint64
}

// simTick is the model's time step.
const simTick = 5 * time.Millisecond

// simMeanTokens is the mean output length; service time scales with it.
const simMeanTokens = 200.0

// simRequest is one request in flight at the model server.
type simRequest struct {
	start  time.Duration
	left   float64 // seconds of service at full speed still to do
	tokens float64
	short  bool // a Short worker's
}

// simServer is a deterministic discrete-time model of a server with a
// knee, as test/fakeprovider's Config.Slots: processor sharing, each of L
// requests served at speed min(1, Slots/L), so a lone request takes Service
// and L above Slots take Service × L/Slots. A seeded math/rand/v2 source
// draws output lengths, hangs and 429s; time is simulated, never read.
type simServer struct {
	cfg      simConfig
	Slots    int     // the knee now; tests move it mid-run
	Throttle float64 // share of admissions answered 429 now (a burst)
	// Short is how many closed-loop workers besides cfg.Workers ask for
	// one output token (max_tokens: 1), another caller's; tests add them
	// mid-run.
	Short   int
	shortIn int // their requests in flight
	// used is the server's capacity used so far: the time integral of
	// min(in flight, Slots), in slot-seconds.
	used     float64
	rng      *rand.Rand
	now      time.Duration
	inFlight []simRequest
	window   time.Duration // start of the rate window
	admitted int           // admissions in the rate window
}

// newSimServer builds the model at time 0.
func newSimServer(cfg simConfig) *simServer {
	return &simServer{cfg: cfg, Slots: cfg.Slots, rng: rand.New(rand.NewPCG(cfg.Seed, 24))} //nolint:gosec // G404: seeded, so every run takes the same steps
}

// run advances the model by d under bound and returns the interval's
// sample, saturated when for at least half its ticks the bound was full
// with workers waiting on it.
func (s *simServer) run(bound int, d time.Duration) adaptiveSample {
	m := adaptiveSample{Bound: bound, Elapsed: d}
	ticks, full := int(d/simTick), 0
	bulk := adaptiveLimits{Bulk: s.cfg.Bulk}.bulk(bound)
	for range ticks {
		s.serve(&m)
		s.admit(bulk, &m)
		if len(s.inFlight) >= bulk && s.workers() > len(s.inFlight) {
			full++
		}
	}
	m.Saturated = 2*full >= ticks
	if !s.cfg.Tokens {
		m.Work = 0
	}
	return m
}

// serve moves every request in flight on by one tick and counts those
// that finished or timed out.
func (s *simServer) serve(m *adaptiveSample) {
	s.now += simTick
	speed := 1.0
	if n := len(s.inFlight); s.Slots > 0 && n > s.Slots {
		speed = float64(s.Slots) / float64(n)
	}
	m.Busy += time.Duration(len(s.inFlight)) * simTick
	used := len(s.inFlight)
	if s.Slots > 0 {
		used = min(used, s.Slots)
	}
	s.used += float64(used) * simTick.Seconds()
	kept := s.inFlight[:0]
	for _, r := range s.inFlight {
		r.left -= speed * simTick.Seconds()
		switch {
		case r.left <= 0:
			m.Completed++
			m.Work += r.tokens
			m.Latency += s.now - r.start
		case s.cfg.Timeout > 0 && s.now-r.start >= s.cfg.Timeout:
			m.Failures++
		default:
			kept = append(kept, r)
			continue
		}
		if r.short {
			s.shortIn--
		}
	}
	s.inFlight = kept
}

// workers is the closed-loop workers now, Short ones included.
func (s *simServer) workers() int { return s.cfg.Workers + s.Short }

// admit lets waiting workers in while the bound and the rate window allow,
// each worker one attempt a tick (a 429 retries on the next).
func (s *simServer) admit(bound int, m *adaptiveSample) {
	if s.now-s.window >= time.Second {
		s.window, s.admitted = s.now-(s.now-s.window)%time.Second, 0
	}
	for waiting := s.workers() - len(s.inFlight); waiting > 0 && len(s.inFlight) < bound; waiting-- {
		if s.cfg.Rate > 0 && s.admitted >= s.cfg.Rate {
			return
		}
		s.admitted++
		if s.Throttle > 0 && s.rng.Float64() < s.Throttle {
			m.Throttled++
			continue
		}
		// The Short workers are another caller, whom fair queuing gives
		// every other admission while both wait.
		shortWait, longWait := s.Short-s.shortIn, waiting-(s.Short-s.shortIn)
		short := shortWait > 0 && (longWait <= 0 || s.rng.IntN(2) == 0)
		s.inFlight = append(s.inFlight, s.request(short))
	}
}

// request draws a new request's output length and service time; a short
// one asks for one token.
func (s *simServer) request(short bool) simRequest {
	tokens := simMeanTokens
	switch σ := s.cfg.Tail; {
	case short:
		tokens = 1
		s.shortIn++
	case σ > 0:
		tokens = math.Exp(math.Log(simMeanTokens) - σ*σ/2 + σ*s.rng.NormFloat64())
	}
	left := s.cfg.Service.Seconds() * (s.cfg.Fixed + (1-s.cfg.Fixed)*tokens/simMeanTokens)
	if s.cfg.Hang > 0 && s.rng.Float64() < s.cfg.Hang {
		left = math.Inf(1)
	}
	return simRequest{start: s.now, left: left, tokens: math.Round(tokens), short: short}
}

// simStep is one interval of a simulated run: the bound in force, the
// controller's answer, and the completions a second the model served.
type simStep struct {
	At       time.Duration // the interval's end
	Bound    int
	Accepted int
	Decision adaptiveDecision
	Done     float64 // completions a second
	Used     float64 // the share of the server's capacity (Slots) used
}

// simulate runs the controller against the model for total in intervals
// of interval, calling at (if not nil) before each interval so a test can
// change the server mid-run.
func simulate(srv *simServer, lim adaptiveLimits, st adaptiveState, interval, total time.Duration, at func(now time.Duration)) []simStep {
	if st.Phase == phaseStart {
		st = lim.initial()
	}
	var steps []simStep
	for srv.now < total {
		if at != nil {
			at(srv.now)
		}
		used := srv.used
		m := srv.run(st.Bound, interval)
		var d adaptiveDecision
		st, d = lim.next(st, m)
		steps = append(steps, simStep{At: srv.now, Bound: m.Bound, Accepted: st.Accepted, Decision: d,
			Done: float64(m.Completed) / interval.Seconds(), Used: (srv.used - used) / interval.Seconds() / float64(max(srv.Slots, 1))})
	}
	return steps
}

// during is the part of a run with from < At ≤ to.
func during(steps []simStep, from, to time.Duration) []simStep {
	var w []simStep
	for _, s := range steps {
		if s.At > from && s.At <= to {
			w = append(w, s)
		}
	}
	return w
}

// throughput is the mean completions a second over steps.
func throughput(steps []simStep) float64 {
	sum := 0.0
	for _, s := range steps {
		sum += s.Done
	}
	return sum / float64(max(len(steps), 1))
}

// boundRange is the least and greatest bound in force over steps.
func boundRange(steps []simStep) (lo, hi int) {
	lo = math.MaxInt
	for _, s := range steps {
		lo, hi = min(lo, s.Bound), max(hi, s.Bound)
	}
	return lo, hi
}

// summary prints a run every every, for a failing test's message and -v.
func summary(steps []simStep, every time.Duration) string {
	var b strings.Builder
	next := every
	for _, s := range steps {
		if s.At >= next || s.Decision.Action == actBackOff || s.Decision.Action == actLatencyRise {
			fmt.Fprintf(&b, "%5.0fs bound %3d accepted %3d %5.1f/s %s (%s)\n",
				s.At.Seconds(), s.Bound, s.Accepted, s.Done, s.Decision.Action, s.Decision.Why)
			for next <= s.At {
				next += every
			}
		}
	}
	return b.String()
}
