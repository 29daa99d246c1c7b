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

// exportOne builds the tracer provider serve builds of c and getenv,
// ends one span, "a span", and shuts the provider down: the batch goes
// out then, not after its timeout.
func exportOne(t *testing.T, c TracingConfig, getenv func(string) string) {
	t.Helper()
	tp, err := newTracerProvider(t.Context(), c, getenv, "test")
	if err != nil || tp == nil {
		t.Fatalf("provider %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "a span")
	span.End()
	shutdownTracing(t.Context(), tp, slog.New(slog.DiscardHandler))
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
	exportOne(t, cfg, lookupIn(nil))
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
	exportOne(t, cfg, lookupIn(nil))
	if got := rc.received(); len(got) != 1 || got[0] != "a span" {
		t.Errorf("the gRPC receiver got spans %q, want [\"a span\"]", got)
	}
}

// TestTracingProtocolFromEnvironment: with no tracing.protocol the
// standard variables choose it (the traces' own first), else
// http/protobuf; tracing.protocol wins over them; a value the exporter
// cannot send (http/json among them) is refused at load naming its
// variable, when tracing is on. The protocol chosen is the one spoken:
// spans reach a gRPC receiver, or an HTTP one.
func TestTracingProtocolFromEnvironment(t *testing.T) {
	const on = "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318"
	tests := []struct {
		name, yaml string
		env        []string
		want       string // the protocol, "off", or the error's start
	}{
		{"neither", "", []string{on}, protocolHTTP},
		{"environment", "", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, protocolGRPC},
		{"the traces' own first", "", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc"}, protocolGRPC},
		{"the file wins", "tracing: {protocol: http/protobuf}\n", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, protocolHTTP},
		{"the file wins over a bad variable", "tracing: {protocol: grpc}\n", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, protocolGRPC},
		{"tracing off reads no variable", "", []string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, "off"},
		{"http/json", "", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"},
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: is http/json, which the OpenTelemetry Go exporter does not send: set http/protobuf or grpc"},
		{"unknown", "", []string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=thrift"}, `OTEL_EXPORTER_OTLP_PROTOCOL: must be http/protobuf or grpc, got "thrift"`},
	}
	for _, tc := range tests {
		cfg, err := loadConfig(writeConfig(t, tc.yaml), nil, lookupIn(tc.env))
		if err != nil {
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%s: refused with %v; want %s", tc.name, err, tc.want)
			}
			continue
		}
		if !cfg.Tracing.enabled(lookupIn(tc.env)) {
			if tc.want != "off" {
				t.Errorf("%s: tracing is off", tc.name)
			}
			continue
		}
		if got, _, err := cfg.Tracing.protocol(lookupIn(tc.env)); got != tc.want || err != nil {
			t.Errorf("%s: protocol %q, %v; want %s", tc.name, got, err, tc.want)
		}
	}

	grpcRC := newGRPCReceiver(t)
	var httpPosts atomic.Int32
	httpRC := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		httpPosts.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer httpRC.Close()
	env := lookupIn([]string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"})
	exportOne(t, TracingConfig{OTLPEndpoint: "http://" + grpcRC.addr, SampleRatio: 1, ServiceName: "test"}, env)
	if got := grpcRC.received(); len(got) != 1 {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the gRPC receiver got %q, want one span", got)
	}
	exportOne(t, TracingConfig{OTLPEndpoint: httpRC.URL, Protocol: protocolHTTP, SampleRatio: 1, ServiceName: "test"}, env)
	if httpPosts.Load() != 1 || len(grpcRC.received()) != 1 {
		t.Errorf("tracing.protocol http/protobuf beside OTEL_EXPORTER_OTLP_PROTOCOL=grpc: %d exports over HTTP, %d spans over gRPC; want 1 and 1",
			httpPosts.Load(), len(grpcRC.received()))
	}
}
