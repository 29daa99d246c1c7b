package fakeprovider

import (
	"context"
	"fmt"
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
	// Socket is the kind of WebSocket the request came on as one turn
	// (Method is then POST, Path the socket's, Header the upgrade's with
	// the turn's x-fake-* metadata as headers); "" for an HTTP request.
	Socket SocketKind
	// StreamID is the lane (stream_id) of a Responses WebSocket turn; ""
	// for the connection's own lane.
	StreamID string
	// ServerCreated says a Realtime response was created by the server
	// (server VAD on a commit), not by a client response.create.
	ServerCreated bool
	// Usage is what the answer's usage reports (a Responses reply, a chat
	// completion, a message, a Realtime response.done), whether or not
	// the client read that far; nil for an answer without usage or one
	// that failed before it was built.
	Usage *Usage
}

// SocketKind is the kind of WebSocket a request came on.
type SocketKind string

// The WebSockets the provider serves.
const (
	// SocketResponses is the Responses API over WebSocket: a turn per
	// response.create.
	SocketResponses SocketKind = "responses"
	// SocketRealtime is a Realtime session: a request per response.
	SocketRealtime SocketKind = "realtime"
)

// Usage is the usage one answer reports, in the provider's terms mapped to
// one shape. Token fields are counts; zero when the answer has none.
type Usage struct {
	InputTokens     int // input, cached included (Anthropic's: uncached plus cache reads)
	CachedTokens    int // input tokens read from the prompt cache
	OutputTokens    int
	ReasoningTokens int // of OutputTokens
	TotalTokens     int
	// The Realtime split of input and output by modality.
	InputTextTokens, InputAudioTokens   int
	OutputTextTokens, OutputAudioTokens int
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

	// WebSockets (socket.go). A turn of a Responses socket and a response
	// of a Realtime session are each a request above as well.
	ResponsesSockets     int // Responses WebSocket connections accepted
	ResponsesSocketsOpen int // of them, open now
	SocketTurns          int // response.create turns that reached the request path
	SocketErrors         int // error events for client events that were no turn (malformed, unsupported, limits)
	RealtimeSessions     int // Realtime sessions accepted
	RealtimeSessionsOpen int // of them, open now
	RealtimeResponses    int // responses in Realtime sessions that reached the request path
	// ServerResponses is the Realtime responses the server created itself
	// (server VAD on a commit), within RealtimeResponses.
	ServerResponses int
	// SocketsMaxAge is the connections closed at Config.WSMaxAge.
	SocketsMaxAge int

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
	model    string     // the model it was limited as (modelOf)
	noQuota  bool       // refused for a model without quota (ModelLimits.NoQuota)
}

// turnInfo is what arriveTurn needs to know of a request beyond its HTTP
// shape.
type turnInfo struct {
	socket        SocketKind
	streamID      string
	limited       bool
	serverCreated bool
	// charge, when set, is the request's token charge (a Realtime
	// response: its input is the conversation, not its body).
	charge *turnCharge
}

// turnCharge is a request's model, prompt tokens and output fields, for
// the limits.
type turnCharge struct {
	model  string
	prompt int
	fields chargeFields
}

// arriveTurn logs a request and, when limited, debits the buckets, all at
// instant now.
func (p *Provider) arriveTurn(r *http.Request, body []byte, now time.Time, ti turnInfo) arrival {
	socket, limited := ti.socket, ti.limited
	rec := &Request{Method: r.Method, Path: r.URL.Path, Arrived: now, TokensRemaining: -1, Socket: socket,
		StreamID: ti.streamID, ServerCreated: ti.serverCreated}
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
	if p.active == 0 {
		p.idle = make(chan struct{})
	}
	p.active++
	p.stats.ByPath[rec.Path]++
	switch socket {
	case SocketResponses:
		p.stats.SocketTurns++
	case SocketRealtime:
		p.stats.RealtimeResponses++
	}
	p.seq++
	a := arrival{rec: rec, gen: p.gen, seq: p.seq, admitted: true}
	switch {
	case limited && ti.charge != nil:
		p.limitCharge(&a, apiFor(r.URL.Path), ti.charge.model, ti.charge.prompt, ti.charge.fields, now)
	case limited:
		p.limit(&a, apiFor(r.URL.Path), r.URL.Path, body, now)
	}
	if ti.serverCreated {
		p.stats.ServerResponses++
	}
	return a
}

// finish records how a request ended. A request that arrived before the
// last Reset only gets its status.
func (p *Provider) finish(a arrival, status int, outcome streamOutcome, flexRefused bool, usage *Usage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active--; p.active == 0 {
		close(p.idle)
	}
	a.rec.Status = status
	if status >= 200 && status < 300 {
		a.rec.Usage = usage
	}
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

// WaitIdle waits until no request (HTTP, or a socket's turn) is being
// answered — every one that arrived is logged with its status and usage —
// or until ctx ends, and returns ctx's error then.
func (p *Provider) WaitIdle(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fakeprovider: wait idle: %w", context.Cause(ctx))
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
		if rec.Usage != nil {
			u := *rec.Usage
			out[i].Usage = &u
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
		p.models[m.Name].noQuota = m.NoQuota
	}
}
