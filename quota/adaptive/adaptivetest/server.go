// Package adaptivetest is a model server with a knee for testing the
// adaptive controller (package adaptive) and quota's wiring of it: a
// deterministic simulation, stepped by the caller in simulated time, of
// closed-loop workers admitted up to a bound to a server that serves
// Slots requests at full speed and shares itself among more. It imports
// nothing of adaptive, so that adaptive's own tests can use it; its
// Interval converts to adaptive.Sample.
package adaptivetest

import (
	"math"
	"math/rand/v2"
	"time"
)

// Config shapes Server: a model server with a knee behind a proxy
// that admits closed-loop workers up to the bound.
type Config struct {
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
	// up to Bulk(bound), as the proxy admits bulk; nil admits them up to
	// the bound. The controller under test must be given the same
	// partition (adaptive.Limits.Bulk).
	Bulk func(bound int) int
	Seed uint64
}

// tick is the model's time step.
const tick = 5 * time.Millisecond

// MeanTokens is the mean output length of a request; service time scales with it.
const MeanTokens = 200.0

// job is one request in flight at the model server.
type job struct {
	start  time.Duration
	left   float64 // seconds of service at full speed still to do
	tokens float64
	short  bool // a Short worker's
}

// Server is a deterministic discrete-time model of a server with a
// knee, as test/fakeprovider's Config.Slots: processor sharing, each of L
// requests served at speed min(1, Slots/L), so a lone request takes Service
// and L above Slots take Service × L/Slots. A seeded math/rand/v2 source
// draws output lengths, hangs and 429s; time is simulated, never read.
type Server struct {
	cfg      Config
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
	inFlight []job
	window   time.Duration // start of the rate window
	admitted int           // admissions in the rate window
}

// Interval is what the model did in one interval under a bound: the
// fields, in order, of adaptive.Sample, so that adaptive.Sample(iv)
// converts it (see there for each field's meaning).
type Interval struct {
	Bound     int
	Saturated bool
	Completed int
	Work      float64
	Elapsed   time.Duration
	Latency   time.Duration
	Busy      time.Duration
	Failures  int
	Throttled int
}

// Now is the model's time, from 0 at NewServer.
func (s *Server) Now() time.Duration { return s.now }

// Used is the server's capacity used so far, in slot-seconds: the time
// integral of min(in flight, Slots).
func (s *Server) Used() float64 { return s.used }

// NewServer builds the model at time 0.
func NewServer(cfg Config) *Server {
	return &Server{cfg: cfg, Slots: cfg.Slots, rng: rand.New(rand.NewPCG(cfg.Seed, 24))} //nolint:gosec // G404: seeded, so every run takes the same steps
}

// Run advances the model by d under bound and returns the interval's
// sample, saturated when for at least half its ticks the bound was full
// with workers waiting on it.
func (s *Server) Run(bound int, d time.Duration) Interval {
	m := Interval{Bound: bound, Elapsed: d}
	ticks, full := int(d/tick), 0
	bulk := bound
	if s.cfg.Bulk != nil {
		bulk = s.cfg.Bulk(bound)
	}
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
func (s *Server) serve(m *Interval) {
	s.now += tick
	speed := 1.0
	if n := len(s.inFlight); s.Slots > 0 && n > s.Slots {
		speed = float64(s.Slots) / float64(n)
	}
	m.Busy += time.Duration(len(s.inFlight)) * tick
	used := len(s.inFlight)
	if s.Slots > 0 {
		used = min(used, s.Slots)
	}
	s.used += float64(used) * tick.Seconds()
	kept := s.inFlight[:0]
	for _, r := range s.inFlight {
		r.left -= speed * tick.Seconds()
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
func (s *Server) workers() int { return s.cfg.Workers + s.Short }

// admit lets waiting workers in while the bound and the rate window allow,
// each worker one attempt a tick (a 429 retries on the next).
func (s *Server) admit(bound int, m *Interval) {
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
func (s *Server) request(short bool) job {
	tokens := MeanTokens
	switch σ := s.cfg.Tail; {
	case short:
		tokens = 1
		s.shortIn++
	case σ > 0:
		tokens = math.Exp(math.Log(MeanTokens) - σ*σ/2 + σ*s.rng.NormFloat64())
	}
	left := s.cfg.Service.Seconds() * (s.cfg.Fixed + (1-s.cfg.Fixed)*tokens/MeanTokens)
	if s.cfg.Hang > 0 && s.rng.Float64() < s.cfg.Hang {
		left = math.Inf(1)
	}
	return job{start: s.now, left: left, tokens: math.Round(tokens), short: short}
}
