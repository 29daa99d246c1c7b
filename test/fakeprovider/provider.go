package fakeprovider

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxBodyBytes bounds a request body; larger ones are answered 413.
const maxBodyBytes = 32 << 20

// Provider is a fake LLM provider. Create it with New; it is an
// http.Handler and is safe for use by multiple goroutines.
type Provider struct {
	cfg Config

	mu       sync.Mutex
	log      []*Request
	arrivals map[int64]int // unix second → arrivals
	stats    Stats
	account  limits             // the limits of every model not in models
	models   map[string]*limits // Config.Models, by model
	seq      uint64             // arrivals ever, for request ids
	gen      uint64             // Reset generation
	slots    int                // Config.Slots, or SetSlots's
	// flexShare is the share of flex requests answered 429 Resource
	// Unavailable (Config.FlexUnavailable, or SetFlexUnavailable's), and
	// flexSeen the flex requests seen since it was set.
	flexShare float64
	flexSeen  uint64
	// active is the requests arrived and not finished, across Resets;
	// idle is closed while it is zero (WaitIdle).
	active int
	idle   chan struct{}
	// sockets are the open WebSockets (socket.go); socketsLive counts
	// them and the upgrades under way, and socketsGone is closed while it
	// is zero (WaitSocketsClosed).
	sockets     map[*socketConn]struct{}
	socketsLive int
	socketsGone chan struct{}
	// socketsClosing is the CloseSockets calls under way: a socket
	// accepted meanwhile is closed at once.
	socketsClosing int
	// jobs are the files and batches (files.go, batch.go).
	jobs *batchJobs
	// capacity is Config.OverCapacity's state (dialects.go).
	capacity capacityFault
}

var _ http.Handler = (*Provider)(nil)

// New returns a Provider for cfg. Zero fields take the defaults documented
// on Config; negative ones count as zero.
func New(cfg Config) *Provider {
	p := &Provider{cfg: cfg.withDefaults(), slots: max(cfg.Slots, 0), flexShare: clampShare(cfg.FlexUnavailable), jobs: newBatchJobs(),
		idle: make(chan struct{}), sockets: make(map[*socketConn]struct{}), socketsGone: make(chan struct{}),
		capacity: capacityFault{share: clampShare(cfg.OverCapacity)}}
	close(p.idle)
	close(p.socketsGone)
	p.resetLocked()
	return p
}

// limits are one set of buckets: the account's, or a model's.
type limits struct {
	requests bucket // RPM
	tokens   bucket // TPM: Anthropic's input with an output bucket
	output   bucket // Anthropic's OTPM; unlimited unless Config.OutputTPM
	// noQuota refuses every request: a Gemini tier without quota for the
	// model (ModelLimits.NoQuota).
	noQuota bool
}

// newLimits are full buckets of rpm, tpm and otpm a minute, refilled per
// cfg (Window), holding what cfg's dialect holds (Dialect.spans), filled
// to cfg.TPMStart.
func newLimits(cfg Config, rpm, tpm, otpm int) *limits {
	rs, ts, os := cfg.Dialect.spans()
	l := &limits{requests: newSpanBucket(rpm, cfg.Window, rs), tokens: newSpanBucket(tpm, cfg.Window, ts),
		output: newSpanBucket(otpm, cfg.Window, os)}
	if f := cfg.TPMStart; f > 0 && f < 1 {
		l.tokens.level *= f
		l.output.level *= f
	}
	return l
}

// limitsFor are the buckets a request for model draws on: the model's own
// when Config.Models lists it, else the account's.
func (p *Provider) limitsFor(model string) *limits {
	if l, ok := p.models[model]; ok {
		return l
	}
	return &p.account
}

// api is the provider whose conventions a path follows.
type api uint8

const (
	openAI api = iota
	anthropic
	// azure is Azure OpenAI: OpenAI's bodies under /openai/deployments/{name}/…
	// or /openai/v1/…, its headers with resets in bare seconds.
	azure
	// gemini is Google's Gemini API (gemini.go): /v1beta/… and
	// /v1/models/{model}:{method}.
	gemini
	// geminiOpenAI is Gemini's OpenAI-compatible endpoint: OpenAI's bodies
	// under /v1beta/openai/…, Google's errors in a JSON array.
	geminiOpenAI
)

// google reports whether a is one of Google's: no rate-limit headers,
// Google's errors.
func (a api) google() bool { return a == gemini || a == geminiOpenAI }

func apiFor(path string) api {
	switch {
	case strings.HasPrefix(path, "/v1beta/openai/"):
		return geminiOpenAI
	case strings.HasPrefix(path, "/v1beta/"):
		return gemini
	case strings.HasPrefix(path, "/v1/models/") && strings.Contains(path, ":"):
		return gemini
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return anthropic
	case strings.HasPrefix(path, "/openai/"):
		return azure
	}
	return openAI
}

// openAIPath is the OpenAI path an Azure OpenAI path serves: Azure's v1
// API (/openai/v1/…), its deployment API (/openai/deployments/{name}/…)
// and its Responses API (/openai/responses) take OpenAI's bodies. Any
// other path is itself.
func openAIPath(path string) string {
	if rest, ok := strings.CutPrefix(path, "/openai/deployments/"); ok {
		if name, tail, _ := strings.Cut(rest, "/"); name != "" && tail != "" {
			return "/v1/" + tail
		}
		return path
	}
	switch rest, _ := strings.CutPrefix(path, "/openai/"); {
	case rest == "responses":
		return "/v1/responses"
	case strings.HasPrefix(rest, "v1/"):
		return "/" + rest
	}
	return path
}

// exchange is one request being answered.
type exchange struct {
	p       *Provider
	w       http.ResponseWriter
	r       *http.Request
	body    []byte
	now     time.Time
	api     api
	arr     arrival
	faults  faults
	status  int           // status written; 0 until then
	outcome streamOutcome // how a stream ended
	// flexRefused says it was answered 429 Resource Unavailable for want
	// of flex capacity (refuseFlex), not by the rate limit.
	flexRefused bool
	// usage is what the answer reports, for the log; nil for none.
	usage *Usage
	// sink, socket and streamID are set for a turn of a WebSocket: its
	// events go to sink instead of an SSE response, an error to it as an
	// error event.
	sink     eventSink
	socket   SocketKind
	streamID string
}

// ServeHTTP serves a WebSocket upgrade on a socket path (socket.go), or
// reads the whole request body, logs and rate-limits the request, applies
// the fault knobs and answers it.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.serveSocket(w, r) {
		return
	}
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	x := &exchange{p: p, w: w, r: r, body: body, now: p.cfg.Now(), api: apiFor(r.URL.Path)}
	x.serve(readErr)
}

// serve logs and rate-limits the exchange's request, applies the fault
// knobs and answers it: an HTTP request, or one turn of a WebSocket
// (x.sink set), which takes the same path.
func (x *exchange) serve(readErr error) {
	p, r, w := x.p, x.r, x.w
	x.arr = p.arriveTurn(r, x.body, x.now, turnInfo{socket: x.socket, streamID: x.streamID, limited: !isBatchPath(r.URL.Path)})
	defer func() { p.finish(x.arr, x.status, x.outcome, x.flexRefused, x.usage) }()
	x.setHeaders()
	if !x.arr.admitted && x.api.google() {
		x.failGeminiLimit(x.arr.model, x.arr.noQuota, max(x.arr.requests.retry, x.arr.tokens.retry))
		return
	}
	if !x.arr.admitted {
		setRetryAfter(w.Header(), max(x.arr.requests.retry, x.arr.tokens.retry, x.arr.output.retry))
		x.fail(http.StatusTooManyRequests, "Rate limit reached. Please try again later.")
		return
	}
	if readErr != nil {
		x.failRead(readErr)
		return
	}
	f, err := parseFaults(r.Header)
	if err != nil {
		x.fail(http.StatusBadRequest, err.Error())
		return
	}
	x.faults = f
	if x.overCapacity() {
		return
	}
	slowdown, done := p.enterService(x.now)
	defer done()
	if !x.queue(time.Duration(float64(f.latencyOr(p.cfg.Latency)) * slowdown)) {
		return
	}
	if f.status != 0 {
		x.injectFault()
		return
	}
	x.route()
	x.chargeGenerated()
}

// setHeaders writes the rate-limit and request-id headers every response
// carries.
func (x *exchange) setHeaders() {
	h := x.w.Header()
	id := fmt.Sprintf("%s%016x", x.p.cfg.RequestIDPrefix, x.arr.seq)
	switch x.api {
	case anthropic:
		setAnthropicLimitHeaders(h, x.now, x.arr.requests, x.arr.tokens, x.arr.output)
		h.Set("request-id", id)
		return
	case azure:
		setAzureLimitHeaders(h, x.arr.requests, x.arr.tokens)
	case gemini, geminiOpenAI:
		return // Google sends no rate-limit headers, and no request id
	default:
		if !x.setDialectLimitHeaders(h) {
			setOpenAILimitHeaders(h, x.arr.requests, x.arr.tokens)
		}
	}
	h.Set("x-request-id", id)
}

// wait holds the response for d; it reports false if the client went away
// first.
func (x *exchange) wait(d time.Duration) bool {
	ctx := x.r.Context()
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// route answers the request by path, Azure's as the OpenAI path it
// serves (openAIPath).
func (x *exchange) route() {
	if x.batchRoute() {
		return
	}
	if x.api == gemini {
		x.geminiRoute()
		return
	}
	type handler struct {
		method string
		answer func()
	}
	handlers := map[string]handler{
		"/v1/chat/completions":       {http.MethodPost, x.chat},
		"/v1/completions":            {http.MethodPost, x.completion},
		"/v1/embeddings":             {http.MethodPost, x.embeddings},
		"/v1/responses":              {http.MethodPost, x.responses},
		"/v1/responses/input_tokens": {http.MethodPost, x.inputTokens},
		"/v1/images/generations":     {http.MethodPost, x.image},
		"/v1/audio/speech":           {http.MethodPost, x.speech},
		"/v1/models":                 {http.MethodGet, x.models},
		"/v1/messages":               {http.MethodPost, x.messages},
		"/v1/messages/count_tokens":  {http.MethodPost, x.countTokens},
		"/v1/batches":                {http.MethodPost, x.openAIBatch},
		"/v1/messages/batches":       {http.MethodPost, x.anthropicBatch},
	}
	path := x.r.URL.Path
	switch x.api {
	case azure:
		path = openAIPath(path)
	case geminiOpenAI:
		path = "/v1/" + strings.TrimPrefix(path, "/v1beta/openai/")
	}
	h, ok := handlers[path]
	switch {
	case !ok:
		x.fail(http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", x.r.Method, x.r.URL.Path))
	case x.r.Method != h.method:
		x.w.Header().Set("Allow", h.method)
		x.fail(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s not allowed on %s", x.r.Method, x.r.URL.Path))
	default:
		h.answer()
	}
}

// isBatchPath reports whether path is a batch's or a file's, which draw
// on quotas of their own.
func isBatchPath(path string) bool {
	for _, p := range []string{"/v1/batches", "/v1/messages/batches", "/v1/files"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// batchRoute answers the file and batch paths other than a batch's
// creation, and reports whether it did.
func (x *exchange) batchRoute() bool {
	path, get, post := x.r.URL.Path, x.r.Method == http.MethodGet, x.r.Method == http.MethodPost
	var id, rest string
	var ok bool
	switch {
	case path == "/v1/files" && post:
		x.uploadFile()
	case get && cut(path, "/v1/files/", &id, &rest) && rest == "content":
		x.fileContent(id)
	case cut(path, "/v1/messages/batches/", &id, &rest):
		switch {
		case get && rest == "":
			x.anthropicBatchGet(id, false)
		case post && rest == "cancel":
			x.anthropicBatchGet(id, true)
		case get && rest == "results":
			x.anthropicResults(id)
		default:
			ok = true
		}
	case cut(path, "/v1/batches/", &id, &rest):
		switch {
		case get && rest == "":
			x.openAIBatchGet(id, false)
		case post && rest == "cancel":
			x.openAIBatchGet(id, true)
		default:
			ok = true
		}
	default:
		ok = true
	}
	return !ok
}

// cut splits what follows prefix in path into its first segment (id, not
// empty) and the rest; false when path is not below prefix.
func cut(path, prefix string, id, rest *string) bool {
	tail, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return false
	}
	*id, *rest, _ = strings.Cut(tail, "/")
	return *id != ""
}

// failRead answers a body that could not be read.
func (x *exchange) failRead(err error) {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		x.fail(http.StatusRequestEntityTooLarge, "Request body too large")
		return
	}
	x.fail(http.StatusBadRequest, "Could not read the request body")
}

// enterService counts a request into service and returns how much slower
// than Config.Latency it is answered: max(1, in service ÷ slots) with a
// knee (Config.Slots), else 1. done counts it out again and adds its time
// in service to Stats.Busy.
func (p *Provider) enterService(at time.Time) (slowdown float64, done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.InService++
	slowdown = 1
	if p.slots > 0 {
		slowdown = max(1, float64(p.stats.InService)/float64(p.slots))
	}
	gen := p.gen
	return slowdown, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if gen == p.gen {
			p.stats.InService--
			p.stats.Busy += p.cfg.Now().Sub(at)
		}
	}
}

// SetSlots changes the knee (Config.Slots) while serving: a server that
// lost or gained capacity. Requests in service keep their latency.
func (p *Provider) SetSlots(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slots = max(n, 0)
}
