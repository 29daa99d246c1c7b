package fakeprovider

import (
	"maps"
	"net/http"
	"time"
)

// Request is one entry of the request log.
type Request struct {
	Method  string
	Path    string
	Header  http.Header // a clone of the request headers
	Body    []byte      // the request body; nil unless Config.RecordBodies
	Arrived time.Time   // by Config.Now
	// Status is the status answered; 0 while the request is in progress or
	// when the client left before any response was written.
	Status int
	// TokensRemaining is what the token bucket had left after this
	// request's debit (exact: Anthropic's headers round it); -1 when
	// tokens are not reported.
	TokensRemaining int
	// TokensCharged is what the request cost the token bucket under
	// EnforceTPM: its admission charge, and Anthropic's output as
	// generated; 0 when it was refused or tokens are not enforced.
	TokensCharged int
	// OutputCharged is Anthropic's output charged to Config.OutputTPM as
	// generated; 0 without an output bucket.
	OutputCharged int
}

// Stats are totals since New or the last Reset. Once every request has
// finished, Requests = Served + RateLimited + Failed + Cancelled.
type Stats struct {
	Requests    int // arrived, counted on arrival
	Served      int // answered 2xx, streams included
	RateLimited int // answered 429, by the rate limit or by X-Fake-Status
	// FlexUnavailable is flex requests answered 429 Resource Unavailable
	// (SetFlexUnavailable); they are not in RateLimited.
	FlexUnavailable int
	Failed          int // answered any other status
	Cancelled       int // the client left before any response was written

	StreamsCompleted int // streams written to the end
	StreamsCut       int // streams the client left before the end
	StreamsAborted   int // streams aborted by X-Fake-Cut-After

	ByPath map[string]int // arrivals per URL path

	// InService is the requests being answered now (Config.Slots counts
	// them), and Busy the time every request spent being answered, summed:
	// its change over an interval, divided by the interval, is the mean
	// number in service (Little's law).
	InService int
	Busy      time.Duration
}

// streamOutcome is how a stream ended.
type streamOutcome uint8

const (
	noStream streamOutcome = iota
	streamCompleted
	streamCut
	streamAborted
)

// arrival is what the provider decided when a request arrived.
type arrival struct {
	rec      *Request
	gen      uint64     // Reset generation the request arrived in
	seq      uint64     // arrival number, for the request id
	admitted bool       // the request bucket held a request
	requests limitState // request bucket after the debit
	tokens   limitState // token bucket after the debit
	output   limitState // Anthropic's output bucket, when it has one
	limits   *limits    // the buckets it drew on; nil when not limited
}

// arrive logs a request and, when limited, debits the buckets, all at
// instant now.
func (p *Provider) arrive(r *http.Request, body []byte, now time.Time, limited bool) arrival {
	rec := &Request{Method: r.Method, Path: r.URL.Path, Arrived: now, TokensRemaining: -1}
	if !p.cfg.NoLog {
		rec.Header = r.Header.Clone()
	}
	if p.cfg.RecordBodies {
		rec.Body = body
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cfg.NoLog {
		p.log = append(p.log, rec)
	}
	p.arrivals[now.Unix()]++
	p.stats.Requests++
	p.stats.ByPath[rec.Path]++
	p.seq++
	a := arrival{rec: rec, gen: p.gen, seq: p.seq, admitted: true}
	if limited {
		p.limit(&a, apiFor(r.URL.Path), r.URL.Path, body, now)
	}
	return a
}

// finish records how a request ended. A request that arrived before the
// last Reset only gets its status.
func (p *Provider) finish(a arrival, status int, outcome streamOutcome, flexRefused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a.rec.Status = status
	if a.gen != p.gen {
		return
	}
	switch {
	case status == 0:
		p.stats.Cancelled++
	case flexRefused:
		p.stats.FlexUnavailable++
	case status == http.StatusTooManyRequests:
		p.stats.RateLimited++
	case status >= 200 && status < 300:
		p.stats.Served++
	default:
		p.stats.Failed++
	}
	switch outcome {
	case streamCompleted:
		p.stats.StreamsCompleted++
	case streamCut:
		p.stats.StreamsCut++
	case streamAborted:
		p.stats.StreamsAborted++
	}
}

// Arrivals returns, per Unix second by Config.Now, how many requests
// arrived in it, those refused with 429 included.
func (p *Provider) Arrivals() map[int64]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.arrivals)
}

// Requests returns a copy of the request log in arrival order.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.log))
	for i, rec := range p.log {
		out[i] = *rec
		out[i].Header = rec.Header.Clone()
		if rec.Body != nil {
			out[i].Body = append([]byte(nil), rec.Body...)
		}
	}
	return out
}

// Stats returns the totals so far.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ByPath = maps.Clone(p.stats.ByPath)
	return s
}

// Reset clears the log, the arrivals, the totals and refills the rate-limit
// buckets. Requests in progress finish into the old log and are not counted.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
}

func (p *Provider) resetLocked() {
	p.gen++
	p.log = nil
	p.arrivals = make(map[int64]int)
	p.stats = Stats{ByPath: make(map[string]int)}
	p.account = *newLimits(p.cfg, p.cfg.RPM, p.cfg.TPM, p.cfg.OutputTPM)
	p.models = make(map[string]*limits, len(p.cfg.Models))
	for _, m := range p.cfg.Models {
		p.models[m.Name] = newLimits(p.cfg, m.RPM, m.TPM, m.OutputTPM)
	}
}
