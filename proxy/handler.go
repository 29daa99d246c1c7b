package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// Handler classifies, admits and forwards requests. It is safe for
// concurrent use. Its parts hold the rest: metering admits a request and
// settles its answer (admission.go, settlement.go), records counts and
// logs how it ended (records.go), the front door screens it (door), the
// accounts say where it goes (accounts.go, spill.go), and the WebSockets
// (sockets) and the batches and uploads (batches) are served by parts of
// their own. The forward path (forward.go) and its retry loop (roundTrip)
// are the handler's own.
type Handler struct {
	shared
	// live is the part of the configuration a reload replaces.
	live atomic.Pointer[Live]
	rp   *httputil.ReverseProxy
	// retry is what the retry loop (roundTrip) sends through.
	retry    retryPath
	metering *metering
	records  *records
	door     frontDoor
	accounts *accounts
	sockets  *sockets
	batches  *batches
	// writeStall is server.write_stall_timeout (recorder).
	writeStall time.Duration
	// aheadGrace is readAhead's grace (the constant, but in tests).
	aheadGrace time.Duration
}

// shared is what the handler and each of its parts work with, set once
// by NewHandler: the admitter every request is admitted by, the metrics,
// the tracer (nil with tracing off: tracing.go), the log, and the reader
// of request bodies within the body memory budget.
type shared struct {
	admitter *quota.Admitter
	m        *metrics
	tr       *tracer
	log      *slog.Logger
	bodies   *bodyReader
}

// retryPath is what the forward path's retry loop (roundTrip) sends
// through: transport, the shared one every attempt goes through, and
// flexClock, the loop's time for flex's backoff (flexretry.go).
type retryPath struct {
	transport http.RoundTripper
	flexClock flexClock
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
	// ConfigVersion identifies the whole configuration (listen addresses
	// included, secrets left out), for /admin/state.
	ConfigVersion string
	// ConfigHash identifies what the replicas of a fleet must agree on
	// (limits, classes, callers, prices), for /admin/state and
	// meterproxy_config_info: equal across a fleet that runs one
	// configuration.
	ConfigHash string
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
	h.metering.last.keep(append(pools, noPool))
	h.live.Store(&l)
	h.metering.shadows.set(l.Shadow) // after the store: a request that reads enforce makes no decision the drop misses
}

// NewHandler returns the forwarding handler for cfg.
func NewHandler(cfg Config, d Deps) (*Handler, error) {
	byName, err := newUpstreamAccounts(cfg.Upstream, d.AccountKeys)
	if err != nil {
		return nil, err
	}
	ft, err := newFamilyTable(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	bodies := newBodyReader(cfg.Server)
	sh := shared{admitter: d.Admitter, log: d.Log, bodies: bodies, tr: newTracer(d.Tracer),
		m: newMetrics(d.Registry, d.Admitter.Pools(), d.Live.Classifier.Callers(), bodies.budget)}
	accts := &accounts{shared: sh, holdsKeys: cfg.Upstream.APIKey != "" || len(cfg.Upstream.Accounts) > 0}
	accts.byName.Store(&byName)
	accts.families.Store(&ft)
	mt := &metering{shared: sh, maxHold: cfg.Upstream.MaxHold, shadows: &shadows{admitter: d.Admitter, decided: sh.m.outcomes.shadow}}
	rs := &records{shared: sh, access: d.Access, ids: requestIDs{prefix: newIDPrefix()}, decisions: cfg.Server.DecisionHeaders}
	door := frontDoor{maxUnknownStreams: cfg.Server.MaxUnknownCallerStreams}
	sk := &sockets{shared: sh, metering: mt, records: rs, accounts: accts, door: door,
		set: newSocketSet(), bounds: newSocketBounds(cfg.Server), sessions: newSessionSet(), writeStall: cfg.Server.WriteStallTimeout,
		// A redirect is never followed: it could take the key elsewhere.
		client: &http.Client{Transport: d.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	h := &Handler{shared: sh, metering: mt, records: rs, door: door, accounts: accts, sockets: sk,
		batches:    &batches{shared: sh, accounts: accts, maxUpload: cfg.Server.MaxUploadBytes},
		retry:      retryPath{transport: sh.tr.transport(d.Transport), flexClock: realFlexClock()},
		writeStall: cfg.Server.WriteStallTimeout, aheadGrace: aheadGrace,
	}
	h.live.Store(&d.Live)
	mt.shadows.set(d.Live.Shadow)
	if d.Registry != nil {
		d.Registry.MustRegister(configInfo{live: &h.live})
	}
	if h.retry.transport == nil {
		h.retry.transport = http.DefaultTransport
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

// ReconfigureAccounts applies a reloaded upstream.accounts: each account's
// URL and key (keys by account name, from their api_key_env) from the
// next request on. Call it before the Admitter's Reconfigure, so that no
// request is admitted at an account the handler does not know yet. An
// account removed stays known: a request admitted there before the
// reload is still sent there, as its admission said.
func (h *Handler) ReconfigureAccounts(cfg UpstreamConfig, keys map[string]string) error {
	return h.accounts.reconfigure(cfg, keys)
}

// DrainSockets drains the open sockets as the proxy shuts down: from now
// on no turn is admitted (an error event, shutting_down) and no socket
// opens; each socket closes (1001) once no turn of it is in flight; those
// still open when ctx ends are closed then, their turns cut. It returns
// when every socket has ended. Call it once, beside http.Server.Shutdown,
// which forgets hijacked connections.
func (h *Handler) DrainSockets(ctx context.Context) { h.sockets.drain(ctx) }

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
	keyFromQuery(r)
	res, err := live.Classifier.Classify(r.Header, r.URL.Path)
	if api := socketOf(r); api != nil { // a WebSocket the proxy meters (socket.go)
		defer h.tr.endRequest(r.Context())
		h.sockets.serve(w, r, api, live, res, err)
		return
	}
	rt, bad := inspect(r)
	ex := h.accounts.newExchange(live, res, rt, w, h.writeStall)
	h.records.begin(ex, w, r, start)
	ex.trace.span = h.tr.requestSpan(r.Context(), ex)
	defer h.records.count(ex) // last: after the response's own counts (forward), even when it panics
	leave, ok := h.door.screen(w, r, ex, bad, err)
	defer leave()
	if !ok {
		return
	}
	if f := h.accounts.unserved(ex, r.Method, r.URL.Path); f != nil {
		closeUnread(w, r)
		ex.refuse(*f)
		return
	}
	if rt.streamed() {
		h.serveStreamed(w, r, ex)
		return
	}
	if f := encodingRefusal(r.Header); f != nil {
		closeUnread(w, r)
		ex.refuse(*f)
		return
	}
	body, err := h.bodies.read(w, r, res.Class == classify.Interactive)
	if err != nil {
		bodyFailed(w, r, ex, err)
		return
	}
	defer body.release()
	payload, bad := h.metering.prepare(r.Header, ex, body)
	if bad != nil {
		ex.refuse(*bad)
		return
	}
	r = withExchange(r, ex)
	if live.Shadow {
		defer h.metering.shadows.decide(r.Context(), ex)()
	} else {
		lease, ok := h.admit(r, ex, start)
		if !ok {
			return
		}
		ex.tally.lease, ex.dest.pool = lease, lease.Pool()
		defer func() { ex.tally.lease.Release() }() // spill may have moved it to another account's lease
	}
	ex.at(h.accounts.of(ex), ex.dest.pool)
	ex.upstream.body = setBody(r, payload)
	var out http.ResponseWriter = ex.rec
	if ex.ask.injected {
		out = &stripWriter{ResponseWriter: ex.rec}
	}
	ex.upstream.gauge = h.m.admission.callerInFlight.WithLabelValues(res.Caller)
	ex.upstream.gauge.Inc() // down when the upstream's answer ends (endUpstream)
	h.forward(out, r, ex)
}

// serveStreamed forwards a batch or upload request, whose body streams
// through, as the batches ready it (batches.open).
func (h *Handler) serveStreamed(w http.ResponseWriter, r *http.Request, ex *exchange) {
	done, ok := h.batches.open(w, r, ex)
	if !ok {
		return
	}
	defer done()
	h.forward(ex.rec, withExchange(r, ex), ex)
}

// admit waits for admission; when it fails the answer is already written
// (or, the client gone, none is).
func (h *Handler) admit(r *http.Request, ex *exchange, start time.Time) (*quota.Lease, bool) {
	lease, f := h.metering.admitExchange(r.Context(), ex, start, apiName{r.Method, r.URL.Path})
	if f != nil {
		ex.refuse(*f)
	}
	return lease, lease != nil
}

// State returns the live numbers for /admin/state. Safe for concurrent use.
func (h *Handler) State() State {
	last, byPool := h.metering.last.get()
	live := h.live.Load()
	return State{ConfigVersion: live.ConfigVersion, ConfigHash: live.ConfigHash, Mode: modeOf(live),
		State: h.admitter.State(), Upstream: last, UpstreamPools: byPool}
}
