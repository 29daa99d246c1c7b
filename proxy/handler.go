package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// Handler classifies, admits and forwards requests. It is safe for
// concurrent use.
type Handler struct {
	// live is the part of the configuration a reload replaces.
	live      atomic.Pointer[Live]
	limiter   *quota.Limiter
	caps      *quota.Caps
	rp        *httputil.ReverseProxy
	bodies    *bodyReader
	m         *metrics
	log       *slog.Logger
	target    *url.URL
	apiKey    string
	maxBody   int64
	storeMode string
	store     StoreStatus
	last      lastReport
}

// Deps are what a Handler is built from.
type Deps struct {
	// Live is the reloadable part of the configuration.
	Live    Live
	Limiter *quota.Limiter
	// Caps admits every request: through its caller's cap, if it has one,
	// then through Limiter.
	Caps *quota.Caps
	// Transport carries every upstream request; see NewTransport.
	Transport http.RoundTripper
	// InFlightBound is the in-flight bound the store enforces (the fleet's
	// with a shared store), exported as a gauge.
	InFlightBound int64
	// Store reports the quota store's health.
	Store StoreStatus
	// StoreMode is "in-process" or "redis", for /admin/state.
	StoreMode string
	Log       *slog.Logger
	Registry  prometheus.Registerer
}

// StoreStatus is what the metrics read of the quota store.
type StoreStatus interface {
	// Degraded reports whether the shared store is bypassed after a failure.
	Degraded() bool
	// Failures counts failed calls to the shared store.
	Failures() int64
}

// Live is the part of the configuration that a reload replaces while the
// proxy serves: who the callers are and how their requests are classified
// and charged.
type Live struct {
	Classifier *classify.Classifier
	// ClassHeader is the header callers mark their class with; it is not
	// forwarded.
	ClassHeader string
	// Reserve is classes.interactive.reserve: bulk is held while the
	// upstream reports less than this fraction of a limit remaining.
	Reserve float64
	// EnforceTokens says account.tokens_per_minute is set: requests are
	// charged a token estimate at admission and corrected at the end.
	EnforceTokens bool
	// InjectStreamUsage is upstream.inject_stream_usage.
	InjectStreamUsage bool
	// ConfigVersion identifies the configuration, for /admin/state.
	ConfigVersion string
	// Shadow (mode: shadow) forwards everything at once and only records
	// what admission would have decided.
	Shadow bool
}

// Reconfigure replaces the live configuration; requests already in
// progress finish under the one they started with. New caller names get
// their metric series.
func (h *Handler) Reconfigure(l Live) {
	h.m.preinitCallers(l.Classifier.Callers())
	h.live.Store(&l)
}

// NewHandler returns the forwarding handler for cfg.
func NewHandler(cfg Config, d Deps) (*Handler, error) {
	target, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		limiter: d.Limiter, caps: d.Caps, log: d.Log, target: target,
		apiKey: cfg.Upstream.APIKey, maxBody: cfg.Server.MaxBodyBytes,
		bodies: newBodyReader(cfg.Server.MaxBodyBytes), storeMode: d.StoreMode, store: d.Store,
		m: newMetrics(d.Registry, d.Live.Classifier.Callers(), d.Limiter, d.Caps, d.Store, d.InFlightBound),
	}
	h.live.Store(&d.Live)
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		Transport:      d.Transport,
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
	for _, m := range h.m.little {
		d = max(d, m.mean())
	}
	return 2 * d
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	live := h.live.Load()
	res, err := live.Classifier.Classify(r.Header, r.URL.Path)
	if errors.Is(err, classify.ErrUnknownCaller) {
		h.refuse(w, r, res, refusal{status: http.StatusUnauthorized, reason: reasonUnknownCaller,
			kind: "authentication_error", message: "meterproxy: the API key is not one of the configured callers"})
		return
	}
	body, err := h.bodies.read(w, r)
	switch {
	case errors.Is(err, errBodyTooLarge):
		h.refuse(w, r, res, refusal{status: http.StatusRequestEntityTooLarge, reason: reasonBodyTooLarge,
			kind: "invalid_request_error", message: "meterproxy: request body exceeds server.max_body_bytes"})
		return
	case err != nil && r.Context().Err() != nil:
		h.cancelled(res)
		return
	case err != nil:
		h.refuse(w, r, res, refusal{status: http.StatusBadRequest, reason: reasonBadRequest,
			kind: "invalid_request_error", message: "meterproxy: could not read the request body"})
		return
	}
	defer h.bodies.put(body)

	ex := &exchange{res: res, api: usage.APIForPath(r.URL.Path), live: live}
	payload := body.Bytes()
	if live.InjectStreamUsage && ex.api == usage.ChatCompletions {
		payload, ex.injected = usage.InjectStreamUsage(payload)
	}
	ex.inputEstimate = usage.EstimateInput(payload)
	if live.EnforceTokens {
		ex.cost = ex.inputEstimate + usage.MaxOutput(payload)
	}
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
	switch {
	case isBatchPath(r.URL.Path):
		h.m.admissions.WithLabelValues(res.Class.String(), admitBatch).Inc()
	case live.Shadow:
		defer h.shadowAdmit(r.Context(), res, ex.cost)()
	default:
		lease, ok := h.admit(w, r, res, ex.cost, start)
		if !ok {
			return
		}
		defer lease.Release()
		ex.lease = lease
	}
	setBody(r, payload)
	if ex.injected {
		w = &stripWriter{ResponseWriter: w}
	}
	h.forward(w, r, res)
}

// admit waits for admission; when it fails the answer is already written.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, res classify.Result, cost int64, start time.Time) (*quota.Lease, bool) {
	class := res.Class.String()
	lease, err := h.caps.Admit(r.Context(), res.Caller, res.Class, cost)
	h.m.queueWait.WithLabelValues(class).Observe(time.Since(start).Seconds())
	if err == nil {
		outcome := admitAdmitted
		if lease.Held() {
			outcome = admitHeld
		}
		h.m.admissions.WithLabelValues(class, outcome).Inc()
		return lease, true
	}
	if refused, ok := errors.AsType[*quota.RefusedError](err); ok {
		h.m.admissions.WithLabelValues(class, admitRefused).Inc()
		f := refusal{status: http.StatusTooManyRequests, reason: reasonQueueFull, kind: "rate_limit_error",
			message: "meterproxy: the " + class + " queue is full", retryAfter: refused.RetryAfter, retry: true}
		if errors.Is(err, quota.ErrWaitTimeout) {
			f.reason, f.message = reasonMaxWait, "meterproxy: no "+class+" capacity within the class's max_wait"
		}
		if refused.Caller != "" {
			f.reason, f.message = reasonCallerCap, "meterproxy: this caller's own cap (callers[].max_in_flight, requests_per_minute) left no room within the "+class+" class's max_wait"
			if errors.Is(err, quota.ErrQueueFull) {
				f.message = "meterproxy: too many of this caller's requests already wait for its own cap"
			}
		}
		h.refuse(w, r, res, f)
		return nil, false
	}
	if r.Context().Err() != nil {
		h.m.admissions.WithLabelValues(class, admitCancelled).Inc()
		h.cancelled(res)
		return nil, false
	}
	h.m.admissions.WithLabelValues(class, admitRefused).Inc()
	f := refusal{status: http.StatusServiceUnavailable, reason: reasonShuttingDown,
		kind: "api_error", message: "meterproxy: shutting down", retryAfter: time.Second, retry: true}
	if errors.Is(err, quota.ErrStoreUnavailable) {
		f.reason, f.message = reasonStoreUnavailable, "meterproxy: the quota store is unavailable and store.on_error is closed"
	}
	h.refuse(w, r, res, f)
	return nil, false
}

// forward sends the admitted request upstream and counts how it ended. A
// response cut short makes ReverseProxy panic with http.ErrAbortHandler;
// the count is taken and the panic goes on to net/http.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, res classify.Result) {
	rec := &recorder{ResponseWriter: w}
	class := res.Class.String()
	start := time.Now()
	defer func() {
		p := recover()
		end := time.Now()
		h.m.upstream.WithLabelValues(class).Observe(end.Sub(start).Seconds())
		h.m.little[res.Class].add(end, end.Sub(start))
		switch {
		case rec.refused != "":
			h.m.refusals.WithLabelValues(class, rec.refused).Inc()
			h.m.requests.WithLabelValues(class, res.Caller, outcomeRefused, codeClass(rec.status)).Inc()
		case rec.cancelled || rec.status == 0:
			h.cancelled(res)
		default:
			h.m.requests.WithLabelValues(class, res.Caller, outcomeForwarded, codeClass(rec.status)).Inc()
		}
		if p != nil {
			side := "upstream"
			if r.Context().Err() != nil {
				side = "client"
			}
			h.m.cutShort.WithLabelValues(class, side).Inc()
			panic(p)
		}
	}()
	h.rp.ServeHTTP(rec, r)
}

func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(h.target)
	if ex := exchangeOf(pr.In.Context()); ex != nil {
		pr.Out.Header.Del(ex.live.ClassHeader)
	}
	pr.Out.Header.Del("Expect") // the body is in memory; no 100-continue round trip
	// An uncompressed body, so usage parsing never sees gzip.
	pr.Out.Header.Set("Accept-Encoding", "identity")
	if h.apiKey != "" {
		replaceCredential(pr.Out.Header, pr.In.URL.Path, h.apiKey)
	}
}

// upstreamError answers when the upstream could not be reached or did not
// answer in time; a client that left gets nothing.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	rec, _ := w.(*recorder)
	if r.Context().Err() != nil {
		if rec != nil {
			rec.cancelled = true
		}
		return
	}
	f := refusal{status: http.StatusBadGateway, reason: reasonUnreachable, kind: "api_error",
		message: "meterproxy: the upstream could not be reached", retry: true}
	if ne, ok := errors.AsType[net.Error](err); (ok && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded) {
		f.status, f.reason, f.message = http.StatusGatewayTimeout, reasonTimeout, "meterproxy: the upstream did not answer in time"
	}
	h.log.Warn("upstream_failed", slog.String("reason", f.reason), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	if rec != nil {
		rec.refused = f.reason
	}
	f.write(w, r.URL.Path)
}

// refuse answers with f and counts a refusal.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, res classify.Result, f refusal) {
	class := res.Class.String()
	h.m.refusals.WithLabelValues(class, f.reason).Inc()
	h.m.requests.WithLabelValues(class, res.Caller, outcomeRefused, codeClass(f.status)).Inc()
	f.write(w, r.URL.Path)
}

func (h *Handler) cancelled(res classify.Result) {
	h.m.requests.WithLabelValues(res.Class.String(), res.Caller, outcomeCancelled, "none").Inc()
}
