package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// Traces (tracing.otlp_endpoint). Each request — and each turn of a
// WebSocket — is a span, continuing the caller's W3C traceparent, with a
// child for its admission wait and one for each upstream attempt; the
// upstream gets the attempt's span context in its traceparent. Names
// and attributes follow the OpenTelemetry GenAI and HTTP semantic
// conventions as of semconv v1.41.0 (the newest the otel module ships
// with the gen_ai attributes), with meterproxy.* for what they have no
// name for. No attribute holds a key or a body.
//
// A nil *tracer is tracing off: every method returns at once, and a
// request allocates nothing for it (exchange.span stays nil).

// tracerName names the instrumentation scope of meterproxy's spans.
const tracerName = "github.com/meterproxy/meterproxy/proxy"

// The meterproxy.* attributes.
const (
	attrCaller    = attribute.Key("meterproxy.caller")
	attrClass     = attribute.Key("meterproxy.class")
	attrAccount   = attribute.Key("meterproxy.account")
	attrPool      = attribute.Key("meterproxy.pool")
	attrOutcome   = attribute.Key("meterproxy.outcome")
	attrReason    = attribute.Key("meterproxy.reason")
	attrHeldBy    = attribute.Key("meterproxy.held_by")
	attrQueued    = attribute.Key("meterproxy.queued_ahead")
	attrAPI       = attribute.Key("meterproxy.api")
	attrEstimated = attribute.Key("meterproxy.usage.estimated")
	attrSpill     = attribute.Key("meterproxy.spill")
	attrFlexRetry = attribute.Key("meterproxy.flex.retry")
	attrFallback  = attribute.Key("meterproxy.flex.fallback")
	attrTurn      = attribute.Key("meterproxy.websocket.turn")
)

// The admission span's outcomes (meterproxy.outcome on it).
const (
	admissionAdmitted  = "admitted"
	admissionHeld      = "held"
	admissionRefused   = "refused"
	admissionCancelled = "cancelled"
)

// tracer makes the spans; nil when tracing is off.
type tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// newTracer is the tracer of tp; nil (tracing off) when tp is nil.
func newTracer(tp trace.TracerProvider) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{t: tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL)), prop: propagation.TraceContext{}}
}

// attempts counts an exchange's upstream attempts beyond its first, for
// their spans and its access log line: spills to another account (spill.go) and flex retries
// (flexretry.go), and whether the last went at the default tier after
// flex had no capacity.
type attempts struct {
	spills, flexRetries int
	fallback            bool
}

// startRequest starts the span of request r, which arrived at start,
// under the caller's traceparent if it sent one; r is returned with the
// span in its context.
func (t *tracer) startRequest(r *http.Request, start time.Time) *http.Request {
	if t == nil {
		return r
	}
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, _ = t.t.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
	return r.WithContext(ctx)
}

// requestSpan is the span startRequest put in ctx, for ex, marked with
// its caller and class; nil when tracing is off.
func (t *tracer) requestSpan(ctx context.Context, ex *exchange) trace.Span {
	if t == nil {
		return nil
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attrCaller.String(ex.res.Caller), attrClass.String(ex.res.Class.String()))
	return span
}

// endRequest ends the span in ctx, if it has not ended: a socket's
// handshake, once its socket is closed (its turns have spans of their
// own).
func (t *tracer) endRequest(ctx context.Context) {
	if t != nil {
		trace.SpanFromContext(ctx).End()
	}
}

// startTurn starts the span of a turn of socket, under the handshake's,
// at start.
func (t *tracer) startTurn(socket, ex *exchange, start time.Time) {
	if t == nil || socket.trace.span == nil {
		return
	}
	_, ex.trace.span = t.t.Start(trace.ContextWithSpan(context.Background(), socket.trace.span), ex.rt.api.String(),
		trace.WithTimestamp(start), trace.WithAttributes(attrCaller.String(ex.res.Caller), attrClass.String(ex.res.Class.String()),
			attrTurn.Bool(true)))
}

// prepared names ex's span after what prepare read of its request:
// "{gen_ai.operation.name} {gen_ai.request.model}", as GenAI spans are
// named, with its GenAI attributes; a request of no API the proxy meters
// keeps its method for a name.
func (t *tracer) prepared(ex *exchange) {
	if t == nil || ex.trace.span == nil {
		return
	}
	op := operationOf(ex.rt.api)
	if op == "" {
		return
	}
	name := op
	if ex.ask.model.Name != "" {
		name += " " + ex.ask.model.Name
	}
	ex.trace.span.SetName(name)
	ex.trace.span.SetAttributes(genAIRequest(ex)...)
}

// genAIRequest are the GenAI attributes of ex's request.
func genAIRequest(ex *exchange) []attribute.KeyValue {
	kv := []attribute.KeyValue{semconv.GenAIOperationNameKey.String(operationOf(ex.rt.api)),
		semconv.GenAIProviderNameKey.String(providerOf(ex.dialect)), attrAPI.String(ex.rt.api.String())}
	if ex.ask.model.Name != "" {
		kv = append(kv, semconv.GenAIRequestModel(ex.ask.model.Name))
	}
	return kv
}

// operationOf is gen_ai.operation.name for api: "" for a request of no
// API the proxy meters.
func operationOf(api usage.API) string {
	switch api {
	case usage.ChatCompletions, usage.Responses, usage.Messages, usage.Realtime:
		return semconv.GenAIOperationNameChat.Value.AsString()
	case usage.GenerateContent:
		return semconv.GenAIOperationNameGenerateContent.Value.AsString()
	case usage.Embeddings, usage.EmbedContent:
		return semconv.GenAIOperationNameEmbeddings.Value.AsString()
	case usage.Completions:
		return semconv.GenAIOperationNameTextCompletion.Value.AsString()
	}
	return ""
}

// providerOf is gen_ai.provider.name for d: semconv's name for OpenAI,
// Azure OpenAI, Anthropic and Gemini (gcp.gemini), and "openai_compatible" for any other
// server of OpenAI's API.
func providerOf(d dialect) string {
	switch d {
	case dialectOpenAI:
		return semconv.GenAIProviderNameOpenAI.Value.AsString()
	case dialectAzure:
		return semconv.GenAIProviderNameAzureAIOpenAI.Value.AsString()
	case dialectAnthropic:
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	case dialectGemini:
		return semconv.GenAIProviderNameGCPGemini.Value.AsString()
	}
	return "openai_compatible"
}

// startAdmission starts the span of ex's admission wait at start (when
// the request arrived: what meterproxy_admission_wait_seconds counts
// from); nil when ex has no span.
func (t *tracer) startAdmission(ex *exchange, start time.Time) trace.Span {
	if t == nil || ex.trace.span == nil {
		return nil
	}
	l := ex.poolLabels()
	_, span := t.t.Start(trace.ContextWithSpan(context.Background(), ex.trace.span), "admission", trace.WithTimestamp(start),
		trace.WithAttributes(attrClass.String(ex.res.Class.String()), attrAccount.String(l.Account), attrPool.String(l.Pool)))
	return span
}

// admitted ends an admission span at end: the request was admitted with
// lease.
func admitted(span trace.Span, lease *quota.Lease, end time.Time) {
	if span == nil {
		return
	}
	outcome, w := admissionAdmitted, lease.Wait()
	if lease.Held() {
		outcome = admissionHeld
	}
	at := quota.LabelsOf(lease.Account(), lease.Pool())
	span.SetAttributes(attrOutcome.String(outcome), attrQueued.Int(w.Queued), attrAccount.String(at.Account), attrPool.String(at.Pool))
	if w.HeldBy != "" {
		span.SetAttributes(attrHeldBy.String(w.HeldBy))
	}
	span.End(trace.WithTimestamp(end))
}

// notAdmitted ends an admission span at end: the request was refused
// for err, with reason (f's, nil when cancelled: its client left).
func notAdmitted(span trace.Span, err error, f *refusal, end time.Time) {
	if span == nil {
		return
	}
	if f == nil {
		span.SetAttributes(attrOutcome.String(admissionCancelled))
	} else {
		span.SetAttributes(attrOutcome.String(admissionRefused), attrReason.String(f.reason))
	}
	if by := heldByOf(err); by != "" {
		span.SetAttributes(attrHeldBy.String(by))
	}
	if e, ok := errors.AsType[*gate.RefusedError](err); ok {
		span.SetAttributes(attrQueued.Int(e.Wait.Queued))
	}
	span.End(trace.WithTimestamp(end))
}

// heldByOf is what held a request refused (or left) for err: its
// caller's cap, a budget's room held by others, or what its pool's wait
// was for.
func heldByOf(err error) string {
	e, ok := errors.AsType[*gate.RefusedError](err)
	switch {
	case !ok || errors.Is(err, gate.ErrQueueFull):
		return ""
	case e.Caller != "":
		return gate.HeldByCap
	case errors.Is(err, gate.ErrBudgetHeld):
		return gate.HeldByBudget
	}
	return e.Wait.HeldBy
}

// settled records the usage u ex's answer reported, once it is known,
// and the model it names as having served it (none: not set).
func (t *tracer) settled(ex *exchange, u usage.Usage) {
	if t == nil || ex.trace.span == nil {
		return
	}
	ex.trace.span.SetAttributes(semconv.GenAIUsageInputTokens(int(u.Input)), semconv.GenAIUsageOutputTokens(int(u.Output)),
		semconv.GenAIUsageCacheReadInputTokens(int(u.CacheRead)), semconv.GenAIUsageReasoningOutputTokens(int(u.Reasoning)),
		attrEstimated.Bool(u.Estimated))
	if u.Model != "" {
		ex.trace.span.SetAttributes(semconv.GenAIResponseModel(u.Model))
	}
}

// end ends ex's span as its request ended: outcome, code (its status, or
// "none") and reason, as it is counted (countAs).
func (t *tracer) end(ex *exchange, outcome, code, reason string) {
	if t == nil || ex.trace.span == nil {
		return
	}
	l := ex.poolLabels()
	ex.trace.span.SetAttributes(attrOutcome.String(outcome), attrAccount.String(l.Account), attrPool.String(l.Pool))
	if reason != "" {
		ex.trace.span.SetAttributes(attrReason.String(reason))
	}
	if status, err := strconv.Atoi(code); err == nil {
		ex.trace.span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			ex.trace.span.SetStatus(codes.Error, "")
		}
	}
	ex.trace.span.End()
}

// transport wraps next so that each upstream attempt is a span of its
// own; next itself when tracing is off.
func (t *tracer) transport(next http.RoundTripper) http.RoundTripper {
	if t == nil {
		return next
	}
	if next == nil {
		next = http.DefaultTransport
	}
	return &tracedTransport{next: next, t: t}
}

// tracedTransport makes a client span of each request it sends — every
// upstream attempt of an exchange: the first, each spill to another
// account, each flex retry, a fallback to the default tier — under the
// request's span, and sends the attempt's span context upstream in
// traceparent (the caller's own replaced). The span ends when the
// answer's body does. Safe for concurrent use.
type tracedTransport struct {
	next http.RoundTripper
	t    *tracer
}

var _ http.RoundTripper = (*tracedTransport)(nil)

// CloseIdleConnections closes next's idle connections.
func (tt *tracedTransport) CloseIdleConnections() {
	if c, ok := tt.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (tt *tracedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ex := exchangeOf(r.Context())
	if ex == nil || ex.trace.span == nil {
		return tt.next.RoundTrip(r)
	}
	l := ex.poolLabels()
	kv := append(genAIRequest(ex), semconv.HTTPRequestMethodKey.String(r.Method), semconv.ServerAddress(r.URL.Hostname()),
		attrAccount.String(l.Account), attrPool.String(l.Pool), attrSpill.Int(ex.trace.tried.spills),
		attrFlexRetry.Int(ex.trace.tried.flexRetries), attrFallback.Bool(ex.trace.tried.fallback))
	ctx, span := tt.t.t.Start(trace.ContextWithSpan(r.Context(), ex.trace.span), "upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(kv...))
	out := r.Clone(ctx) // the caller's request is not ours to change
	tt.t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := tt.next.RoundTrip(out)
	if err != nil {
		span.SetAttributes(attrReason.String(transportRefusal(err).reason))
		span.SetStatus(codes.Error, "")
		span.End()
		return nil, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, "")
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		span.End()
		return resp, nil
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: span}
	return resp, nil
}

// spanBody ends an attempt's span when its body ends: read to its end or
// closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
}

// Read implements io.Reader.
func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.span.End() // later calls do nothing
	}
	return n, err
}

// Close implements io.Closer.
func (b *spanBody) Close() error {
	b.span.End()
	return b.ReadCloser.Close()
}
