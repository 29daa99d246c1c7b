package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestTracingConfigRefusesBadInput: each bad tracing key is refused by
// name, and tracing is on only with an endpoint, in the file or the
// standard variables.
func TestTracingConfigRefusesBadInput(t *testing.T) {
	path := writeConfig(t, `tracing:
  otlp_endpoint: "collector:4318"
  protocol: thrift
  sample_ratio: 1.5
  service_name: ""
`)
	_, err := loadConfig(path, nil, lookupIn(nil))
	if err == nil {
		t.Fatal("a bad tracing section was accepted")
	}
	for _, key := range []string{"tracing.otlp_endpoint", "tracing.protocol", "tracing.sample_ratio", "tracing.service_name"} {
		if !strings.Contains(err.Error(), key+":") {
			t.Errorf("the error names no %s:\n%v", key, err)
		}
	}
	off := defaultTracing()
	if off.enabled(lookupIn(nil)) {
		t.Error("tracing is on with no endpoint anywhere")
	}
	for _, env := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if !off.enabled(lookupIn([]string{env + "=http://collector:4318"})) {
			t.Errorf("%s set, tracing is still off", env)
		}
	}
}

// TestTracerProviderExportsOnShutdown: with tracing.otlp_endpoint set,
// the provider serve builds sends its spans to <endpoint>/v1/traces over
// OTLP/HTTP, the last of them when it is shut down after the drain.
func TestTracerProviderExportsOnShutdown(t *testing.T) {
	var posts atomic.Int32
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/base/v1/traces" {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rc.Close()
	cfg := defaultTracing()
	cfg.OTLPEndpoint = rc.URL + "/base"
	tp, err := newTracerProvider(t.Context(), cfg, lookupIn(nil), "test")
	if err != nil || tp == nil {
		t.Fatalf("provider %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "a span")
	span.End()
	shutdownTracing(t.Context(), tp, slog.New(slog.DiscardHandler)) // the batch goes out now, not after its timeout
	if posts.Load() != 1 {
		t.Errorf("%d exports to /base/v1/traces, want 1", posts.Load())
	}
	if off, err := newTracerProvider(t.Context(), defaultTracing(), lookupIn(nil), "test"); off != nil || err != nil {
		t.Errorf("with no endpoint: %v, %v; want no provider", off, err)
	}
}

// TestTracerProviderExportsOverGRPC: with tracing.protocol grpc the
// provider serve builds sends its spans to a real OTLP/gRPC receiver,
// the last of them when it is shut down; an http:// endpoint is spoken
// to in plaintext (the receiver has no TLS: a TLS handshake would
// deliver nothing).
func TestTracerProviderExportsOverGRPC(t *testing.T) {
	rc := newGRPCReceiver(t)
	cfg := defaultTracing()
	cfg.OTLPEndpoint, cfg.Protocol = "http://"+rc.addr, protocolGRPC
	tp, err := newTracerProvider(t.Context(), cfg, lookupIn(nil), "test")
	if err != nil || tp == nil {
		t.Fatalf("provider %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "a span")
	span.End()
	shutdownTracing(t.Context(), tp, slog.New(slog.DiscardHandler)) // the batch goes out now, not after its timeout
	if got := rc.received(); len(got) != 1 || got[0] != "a span" {
		t.Errorf("the gRPC receiver got spans %q, want [\"a span\"]", got)
	}
}
