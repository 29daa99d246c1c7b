package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Handler classifies, admits and forwards requests. It is safe for
// concurrent use.
type Handler struct {
	// live is the part of the configuration a reload replaces.
	live     atomic.Pointer[Live]
	admitter *quota.Admitter
	rp       *httputil.ReverseProxy
	// upstream is the shared transport every attempt of the forward
	// path's retry loop (roundTrip) goes through; flexClock is the
	// loop's time for flex's backoff (flexretry.go).
	upstream  http.RoundTripper
	flexClock flexClock
	bodies    *bodyReader
	m         *metrics
	log       *slog.Logger
	// accounts are where requests go, by the account quota admitted them
	// at (accounts.go; ReconfigureAccounts replaces it); holdsKeys says the
	// proxy injects a key of its own into every request (upstream.api_key,
	// or several accounts).
	accounts  atomic.Pointer[map[string]upstreamAccount]
	holdsKeys bool
	provider  upstreamProvider
	maxUpload int64
	maxHold   time.Duration
	// writeStall is server.write_stall_timeout (recorder);
	// maxUnknownStreams is server.max_unknown_caller_streams
	// (enterUnknown).
	writeStall        time.Duration
	maxUnknownStreams int
	// aheadGrace is readAhead's grace (the constant, but in tests).
	aheadGrace time.Duration
	// sockets are the WebSockets open (socketset.go), bounded by
	// socketBounds; socketClient dials their upstreams through the
	// shared transport.
	sockets      *socketSet
	socketBounds socketBounds
	socketClient *http.Client
	// sessions counts the Realtime sessions open (realtimesessions.go).
	sessions *sessionSet
	last     lastReport
	// tr makes the requests' trace spans; nil with tracing off
	// (tracing.go).
	tr *tracer
	// access is the access log (nil: off); ids makes request ids.
	access *AccessLog
	ids    requestIDs
}

// Deps are what a Handler is built from.
type Deps struct {
	// Live is the reloadable part of the configuration.
	Live Live
	// Admitter admits every request, and reports the store's state for
	// the metrics and /admin/state.
	Admitter *quota.Admitter
	// Transport carries every upstream request; see NewTransport.
	Transport http.RoundTripper
	// AccountKeys are the keys of upstream.accounts, by account name, as
	// their api_key_env variables hold them; unused without them.
	AccountKeys map[string]string
	Log         *slog.Logger
	Registry    prometheus.Registerer
	// Tracer makes the requests' trace spans (tracing.go); nil is
	// tracing off.
	Tracer trace.TracerProvider
	// Access is the access log (log.access); nil when it is off.
	Access *AccessLog
}

// Live is the part of the configuration that a reload replaces while the
// proxy serves: who the callers are and how their requests are classified
// and charged.
type Live struct {
	Classifier *classify.Classifier
	// ClassHeader is the header callers mark their class with; it is not
	// forwarded.
	ClassHeader string
	// Refill is upstream.refill: how long such a hold lasts (refillOf).
	Refill Refill
	// InjectStreamUsage is upstream.inject_stream_usage.
	InjectStreamUsage bool
	// ConfigVersion identifies the configuration, for /admin/state.
	ConfigVersion string
	// Shadow (mode: shadow) forwards everything at once and only records
	// what admission would have decided.
	Shadow bool
	// Sessions bounds the Realtime sessions open at once on this
	// replica.
	Sessions SessionLimits
}

// Reconfigure replaces the live configuration; requests already in
// progress finish under the one they started with. New caller names get
// their metric series.
func (h *Handler) Reconfigure(l Live) {
	pools := h.admitter.Pools()
	h.m.preinitAll(pools, l.Classifier.Callers())
	h.last.keep(append(pools, noPool))
	h.live.Store(&l)
}

// NewHandler returns the forwarding handler for cfg.
func NewHandler(cfg Config, d Deps) (*Handler, error) {
	accounts, err := newUpstreamAccounts(cfg.Upstream, d.AccountKeys)
	if err != nil {
		return nil, err
	}
	first, err := url.Parse(cfg.Upstream.firstURL())
	if err != nil {
		return nil, err
	}
	bodies := newBodyReader(cfg.Server)
	h := &Handler{
		admitter: d.Admitter, log: d.Log, provider: newUpstreamProvider(cfg.Upstream.Provider, first),
		holdsKeys: cfg.Upstream.APIKey != "" || len(cfg.Upstream.Accounts) > 0, maxUpload: cfg.Server.MaxUploadBytes, maxHold: cfg.Upstream.MaxHold,
		writeStall: cfg.Server.WriteStallTimeout, maxUnknownStreams: cfg.Server.MaxUnknownCallerStreams, aheadGrace: aheadGrace,
		bodies: bodies, sockets: newSocketSet(), socketBounds: newSocketBounds(cfg.Server), sessions: newSessionSet(),
		// A redirect is never followed: it could take the key elsewhere.
		socketClient: &http.Client{Transport: d.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		m:            newMetrics(d.Registry, d.Admitter.Pools(), d.Live.Classifier.Callers(), bodies.budget),
		tr:           newTracer(d.Tracer),
	}
	h.live.Store(&d.Live)
	h.accounts.Store(&accounts)
	h.access, h.ids.prefix = d.Access, newIDPrefix()
	h.upstream, h.flexClock = h.tr.transport(d.Transport), realFlexClock()
	if h.upstream == nil {
		h.upstream = http.DefaultTransport
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		Transport:      roundTripFunc(h.roundTrip),
		BufferPool:     newCopyBuffers(),
		ErrorHandler:   h.upstreamError,
		ErrorLog:       slog.NewLogLogger(d.Log.Handler(), slog.LevelWarn),
	}
	return h, nil
}

// ServiceTime is twice the longest recent mean upstream service time of
// the classes (0 before any request completed): how long before the end
// of the drain a request must be admitted to finish in time, with margin.
func (h *Handler) ServiceTime() time.Duration {
	var d time.Duration
	for _, m := range h.m.admission.little {
		d = max(d, m.mean())
	}
	return 2 * d
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	r = h.tr.startRequest(r, start)
	live := h.live.Load()
	res, err := live.Classifier.Classify(r.Header, r.URL.Path)
	if api := socketOf(r); api != nil { // a WebSocket the proxy meters (socket.go)
		defer h.tr.endRequest(r.Context())
		h.serveSocket(w, r, api, live, res, err)
		return
	}
	rt, bad := inspect(r)
	ex := &exchange{res: res, endpoint: h.provider.resolve(rt), live: live, spent: h.holdsKeys || res.Known,
		rec: newRecorder(w, h.writeStall)}
	h.begin(ex, w, r, start)
	ex.span = h.tr.requestSpan(r.Context(), ex)
	defer h.count(ex) // last: after the response's own counts (forward), even when it panics
	leave, ok := h.screen(w, r, ex, bad, err)
	defer leave()
	if !ok {
		return
	}
	if rt.streamed() {
		h.serveStreamed(w, r, ex)
		return
	}
	if f := encodingRefusal(r.Header); f != nil {
		closeUnread(w, r)
		h.refuse(ex, *f)
		return
	}
	body, err := h.bodies.read(w, r, res.Class == classify.Interactive)
	if err != nil {
		h.bodyFailed(w, r, ex, err)
		return
	}
	defer body.release()
	payload, bad := h.prepare(r.Header, ex, body)
	if bad != nil {
		h.refuse(ex, *bad)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
	if live.Shadow {
		defer h.shadowAdmit(r.Context(), ex)()
	} else {
		lease, ok := h.admit(r, ex, start)
		if !ok {
			return
		}
		ex.lease, ex.pool = lease, lease.Pool()
		defer func() { ex.lease.Release() }() // spill may have moved it to another account's lease
	}
	ex.at(h.accountOf(ex), ex.pool)
	setBody(r, payload)
	var out http.ResponseWriter = ex.rec
	if ex.injected {
		out = &stripWriter{ResponseWriter: ex.rec}
	}
	ex.upstream.gauge = h.m.admission.callerInFlight.WithLabelValues(res.Caller)
	ex.upstream.gauge.Inc() // down when the upstream's answer ends (endUpstream)
	h.forward(out, r, ex)
}

// prepare reads what admission needs of a metered request's body (its
// headers hdr) into
// ex — its input estimate, pool and token charge — from one walk of it
// (readFields), and returns the payload to forward (with stream usage
// injected when configured); a refusal when the body is refused, before
// anything is admitted. The charge is what the provider would charge,
// always: whether the request's pool charges tokens is quota's to decide.
// A request quota sends at the flex tier (flexFor) gets service_tier
// "flex" unless it names a tier itself.
func (h *Handler) prepare(hdr http.Header, ex *exchange, body *body) ([]byte, *refusal) {
	payload := body.Bytes()
	fields, bad := readFields(hdr.Get("Content-Type"), payload)
	if bad != nil {
		return nil, bad
	}
	ex.access.bytesIn, ex.access.stream = int64(len(payload)), fields.Stream || ex.socket // as the client sent it
	// Only a stream can want its usage injected: a plain request is not
	// walked again for it.
	if ex.live.InjectStreamUsage && ex.rt.api == usage.ChatCompletions && fields.Stream {
		if payload, ex.injected = usage.InjectStreamUsage(payload); ex.injected {
			body.charge(int64(cap(payload)))
		}
	}
	ex.inputEstimate = usage.EstimateInput(payload)
	ex.background = ex.rt.api == usage.Responses && fields.Background
	ex.hiddenInput, ex.longContext = fields.HiddenInput, ex.rt.api == usage.Messages && longContext(hdr)
	ex.model, ex.outputCap, ex.generations = modelOf(ex.rt, fields), fields.OutputCeiling(), fields.Generations
	home := h.admitter.HomeAccount(ex.res.Class) // until admission says where it goes
	ex.at(home, h.admitter.PoolAt(home, func() quota.Model { return ex.model }))
	ex.pooled = true
	ex.cost, ex.settle = ex.dialect.charge(ex.inputEstimate, fields)
	if f, ok := h.flexFor(ex); ok {
		if out, injected := usage.InjectServiceTier(payload, price.TierFlex); injected {
			ex.flex, ex.tier = &flexSend{plain: payload, fallback: f.Fallback}, f.Tier
			body.charge(int64(cap(out)))
			payload = out
		}
	}
	h.tr.prepared(ex)
	return payload, nil
}

// serveStreamed forwards a batch or upload request, whose body streams
// through: the provider's separate quota, so the windows are not charged
// (meterproxy_admissions_total outcome batch or upload). A batch's
// creation goes through the budgets instead (serveBatchCreate), and an
// upload to /v1/files is metered as it passes (uploadMeter).
func (h *Handler) serveStreamed(w http.ResponseWriter, r *http.Request, ex *exchange) {
	if !ex.live.Shadow && h.serveBatchCreate(w, r, ex) {
		return
	}
	sb, err := h.bodies.streamBody(w, r, h.maxUpload)
	if err != nil {
		h.bodyFailed(w, r, ex, err)
		return
	}
	defer sb.stop()
	ex.upload = sb
	if r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == openAIFilesPath && ex.rt.family == familyOpenAI {
		if sb.meter = newUploadMeter(r.Header.Get("Content-Type"), h.bodies.budget); sb.meter != nil {
			ex.uploadMeter = sb.meter
			defer sb.meter.stop()
		}
	}
	ex.at(h.accountOf(ex), ex.pool)
	outcome := admitBatch
	if ex.rt.kind == routeUpload {
		outcome = admitUpload
	}
	l := ex.poolLabels()
	h.m.admission.admissions.WithLabelValues(l.Account, l.Pool, ex.res.Class.String(), outcome).Inc()
	h.forward(ex.rec, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)), ex)
}

// closeUnread marks an HTTP/1 connection to close after the answer to a
// request whose body is left unread. Otherwise net/http reads (discards)
// up to 256 KiB of it before answering, with no deadline: a client that
// trickles its body would hold the answer, and the connection, forever.
// (On HTTP/2 the stream is reset instead; a "Connection: close" there
// would end every other stream of the connection.)
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// bodyRefusal is the answer to a body that failed on the client's side
// (too large, too slow, no memory for it), whether found while reading it
// whole or while it streamed upstream; ok is false for any other error.
func bodyRefusal(err error, streamed bool) (f refusal, ok bool) {
	switch {
	case errors.Is(err, errBodyTooLarge):
		f = refusal{status: http.StatusRequestEntityTooLarge, reason: reasonBodyTooLarge, kind: "invalid_request_error",
			message: "meterproxy: request body exceeds server.max_body_bytes"}
		if streamed {
			f.message = "meterproxy: request body exceeds server.max_upload_bytes"
		}
	case errors.Is(err, errBodyTimeout):
		f = refusal{status: http.StatusRequestTimeout, reason: reasonBodyTimeout, kind: "invalid_request_error",
			message: "meterproxy: the request body did not arrive within server.body_read_timeout"}
		if streamed {
			f.message = "meterproxy: the request body stalled for longer than server.body_read_timeout"
		}
	case errors.Is(err, errBodyMemory):
		f = refusal{status: http.StatusServiceUnavailable, reason: reasonBodyMemory, kind: "api_error", retry: true, retryAfter: time.Second,
			message: "meterproxy: too many request bodies in memory (server.max_body_memory_bytes); retry shortly"}
	default:
		return refusal{}, false
	}
	return f, true
}

// bodyFailed answers a request whose body could not be read.
func (h *Handler) bodyFailed(w http.ResponseWriter, r *http.Request, ex *exchange, err error) {
	closeUnread(w, r)
	f, ok := bodyRefusal(err, ex.rt.streamed())
	switch {
	case ok:
	case r.Context().Err() != nil:
		return // the client left: nothing is written, and it counts as cancelled
	default:
		f = refusal{status: http.StatusBadRequest, reason: reasonBadRequest,
			kind: "invalid_request_error", message: "meterproxy: could not read the request body"}
	}
	h.refuse(ex, f)
	if f.reason == reasonBodyMemory || f.reason == reasonBodyTooLarge {
		linger(w, r)
	}
}

// lingerTime and lingerBytes bound how long and how much of a refused
// HTTP/1 body linger reads.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// linger reads and throws away what the client still sends of a refused
// HTTP/1 body, once the answer is out, for at most lingerTime and
// lingerBytes. A client still writing its body when the connection closes
// gets a reset, and a reset drops the answer waiting unread in its socket:
// it would see "broken pipe" instead of the 503 or 413 that says why. The
// connection closes afterwards all the same (closeUnread).
func linger(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.Body == nil {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
}

// admit waits for admission; when it fails the answer is already written
// (or, the client gone, none is).
func (h *Handler) admit(r *http.Request, ex *exchange, start time.Time) (*quota.Lease, bool) {
	lease, f := h.admitExchange(r.Context(), ex, start, r.Method+" "+r.URL.Path)
	if f != nil {
		h.refuse(ex, *f)
	}
	return lease, lease != nil
}

// admitExchange waits for ex's admission (quota.Admitter.Admit) while ctx
// lasts and counts its decision; start is when the request arrived, api
// its method and path as a refusal names them. It returns the lease, or
// the refusal to answer with — none when ctx ended first (the client
// left: cancelled). HTTP requests (admit) and socket turns
// (socketturn.go) are admitted by it alike.
func (h *Handler) admitExchange(ctx context.Context, ex *exchange, start time.Time, api string) (*quota.Lease, *refusal) {
	res := ex.res
	class, pool := res.Class.String(), ex.poolLabels()
	waiting := h.m.admission.callerWaiting.WithLabelValues(pool.Account, pool.Pool, class, res.Caller)
	waiting.Inc()
	span := h.tr.startAdmission(ex, start)
	lease, err := h.admitter.Admit(ctx, ex.request())
	waiting.Dec()
	end := time.Now()
	ex.access.waited = end.Sub(start)
	wait := ex.access.waited.Seconds()
	if err == nil {
		admitted(span, lease, end)
		h.m.admission.queueWait.WithLabelValues(class, waitAdmitted).Observe(wait)
		outcome := admitAdmitted
		if lease.Held() {
			outcome = admitHeld
		}
		at := quota.LabelsOf(lease.Account(), lease.Pool()) // where it was admitted: maybe not the account it waited at first
		h.m.admission.admissions.WithLabelValues(at.Account, at.Pool, class, outcome).Inc()
		h.m.admission.callerAdmissions.WithLabelValues(at.Account, at.Pool, class, res.Caller).Inc()
		return lease, nil
	}
	f, decided := reasonOf(err, res.Class, api)
	switch {
	case !decided && ctx.Err() != nil: // the client left first
		h.m.admission.admissions.WithLabelValues(pool.Account, pool.Pool, class, admitCancelled).Inc()
		notAdmitted(span, err, nil, end)
		return nil, nil
	case ctx.Err() == nil && f.reason != reasonChargeTooLarge: // a charge too large is refused before it waits
		h.m.admission.queueWait.WithLabelValues(class, waitRefused).Observe(wait)
	}
	h.m.admission.admissions.WithLabelValues(pool.Account, pool.Pool, class, admitRefused).Inc()
	notAdmitted(span, err, &f, end)
	return nil, &f
}

// rewrite sends the request to its account (exchange.account), with the
// account's key when the proxy holds one.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeOf(pr.In.Context())
	ex.in = pr.In
	acct := h.account(ex.account)
	pr.SetURL(acct.target)
	pr.Out.Header.Del(ex.live.ClassHeader)
	pr.Out.Header.Del("Expect") // the body is in memory; no 100-continue round trip
	pr.Out.Header[requestIDHeader] = []string{ex.access.requestID}
	// An uncompressed body, so usage parsing never sees gzip.
	pr.Out.Header.Set("Accept-Encoding", "identity")
	if acct.key != "" {
		replaceCredential(pr.Out.Header, ex.credential(), acct.key)
	}
	// The answer is read ahead of the client (readahead.go), which stops
	// it by cancelling the request.
	ctx, cancel := context.WithCancel(pr.Out.Context())
	pr.Out, ex.stopUpstream = pr.Out.WithContext(ctx), cancel
}

// upstreamError answers when the upstream could not be reached or did not
// answer in time; a client that left gets nothing.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r.Context())
	if ex.upload != nil && ex.upload.err() != nil {
		err = ex.upload.err() // the client's side failed, not the upstream
	}
	if ex.batch != nil && !neverSent(err) {
		ex.batch.Bind("") // the provider may have created it, under an id never seen: spent in full
	}
	f, clientSide := bodyRefusal(err, true) // only a streamed body is still read here
	if r.Context().Err() != nil && !clientSide {
		return // nothing is written: it counts as cancelled
	}
	switch {
	case clientSide:
		closeUnread(w, r)
	default:
		f = transportRefusal(err)
	}
	if ex.lease != nil {
		// No answer: a failure for the adaptive bound (of this account's
		// requests only), and a request that never left cost nothing.
		ex.lease.Settle(quota.Outcome{Unsent: neverSent(err), Measured: ex.spent && !clientSide})
	}
	h.log.Warn("upstream_failed", slog.String("reason", f.reason), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	h.refuse(ex, f)
}

// transportRefusal is the answer to a request whose upstream exchange
// failed with err before any answer: 504 when it timed out, else 502.
func transportRefusal(err error) refusal {
	if isTimeout(err) {
		return refusal{status: http.StatusGatewayTimeout, reason: reasonTimeout, kind: "api_error",
			message: "meterproxy: the upstream did not answer in time", retry: true}
	}
	return refusal{status: http.StatusBadGateway, reason: reasonUnreachable, kind: "api_error",
		message: "meterproxy: the upstream could not be reached", retry: true}
}

// neverSent reports whether a transport error says the request never
// left: no connection to the upstream could be made (the dial or the
// name lookup failed). Only then is its token charge given back. Any
// other failure — a timeout, a connection that broke after the request
// was written — may have reached the provider, which charges a request
// as it arrives, so the charge stands.
func neverSent(err error) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	_, ok := errors.AsType[*net.DNSError](err)
	return ok
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return (ok && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded)
}

// refuse answers ex's request with f in the shape of its API, and marks
// it refused for its reason, or negotiated for a negotiation (counted when
// ServeHTTP ends).
func (h *Handler) refuse(ex *exchange, f refusal) {
	if f.negotiation {
		ex.rec.negotiated = f.reason
	} else {
		ex.rec.refuse(f.reason)
	}
	f.write(ex.rec, ex.errorShape())
}

// count records how ex's request ended, once, when ServeHTTP ends:
// meterproxy_requests_total by its outcome (recorder.outcome) and, for a
// refusal, meterproxy_refusals_total by its reason — or, for a front-door
// negotiation, meterproxy_negotiations_total alone: it asked nothing of
// an API, so it is no request of a class. It is the only place any of
// them is counted, so every request is counted exactly once.
func (h *Handler) count(ex *exchange) {
	h.logExchange(ex)
	if ex.rec.negotiated != "" {
		h.m.outcomes.negotiations.WithLabelValues(ex.rec.negotiated).Inc()
		h.tr.end(ex, outcomeRefused, statusCode(ex.rec.status), ex.rec.negotiated)
		return
	}
	outcome, code := ex.rec.outcome()
	h.countAs(ex, outcome, code, ex.rec.refused)
}

// countAs counts ex's request ended as outcome with code, refused for
// reason when outcome is refused: what count does for an HTTP request,
// and a socket turn's end (socketturn.go) does for a turn.
func (h *Handler) countAs(ex *exchange, outcome, code, reason string) {
	class := ex.res.Class.String()
	if outcome == outcomeRefused {
		l := ex.poolLabels()
		h.m.outcomes.refusals.WithLabelValues(l.Account, l.Pool, class, reason).Inc()
	}
	h.m.outcomes.requests.WithLabelValues(class, ex.res.Caller, outcome, code).Inc()
	h.tr.end(ex, outcome, code, reason)
}
