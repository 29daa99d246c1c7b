package proxy

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: POST /v1/traces with an
// ExportTraceServiceRequest in protobuf, gzipped or not, as the
// collector's otlp receiver takes it, decoded with the official
// protobufs; it keeps every span it received.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

// maxExport bounds one export's body, as a receiver does.
const maxExport = 16 << 20

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces in application/x-protobuf", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxExport)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = io.LimitReader(zr, maxExport)
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// tracerProvider is a tracer provider exporting to rc through the real
// OTLP/HTTP exporter, gzipped, each span as it ends (a simple
// processor: no batch timeout to wait for). It is shut down when the
// test ends.
func (rc *otlpReceiver) tracerProvider(t *testing.T) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(rc.srv.URL+"/v1/traces"),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return tp
}

// received is every span received so far.
func (rc *otlpReceiver) received() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

// trace waits for a trace whose root (a span with no parent among those
// received, named name) has ended with its children named children, and
// returns its spans by name.
func (rc *otlpReceiver) trace(t *testing.T, root string, children ...string) map[string]*tracepb.Span {
	t.Helper()
	var got map[string]*tracepb.Span
	waitFor(t, "the trace of "+root, func() bool {
		got = map[string]*tracepb.Span{}
		spans := rc.received()
		for _, s := range spans {
			if s.GetName() == root {
				got[root] = s
			}
		}
		r := got[root]
		if r == nil {
			return false
		}
		for _, s := range spans {
			if string(s.GetParentSpanId()) == string(r.GetSpanId()) {
				got[s.GetName()] = s
			}
		}
		for _, c := range children {
			if got[c] == nil {
				return false
			}
		}
		return true
	})
	return got
}

// attrs are s's attributes by key, as strings (ints and bools
// formatted).
func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.GetAttributes() {
		m[kv.GetKey()] = anyString(kv.GetValue())
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}

// spanDuration is s's duration.
func spanDuration(s *tracepb.Span) time.Duration {
	return time.Unix(0, int64(s.GetEndTimeUnixNano())).Sub(time.Unix(0, int64(s.GetStartTimeUnixNano()))) //nolint:gosec // nanoseconds since 1970 fit an int64 until 2262
}

// traceID is s's trace id in hex, as traceparent writes it.
func traceID(s *tracepb.Span) string { return hex.EncodeToString(s.GetTraceId()) }
