package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"path"
	"time"

	"github.com/meterproxy/meterproxy/internal/configcheck"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// TracingConfig is the tracing section: where the requests' trace spans
// go (OTLP), and how many are kept.
type TracingConfig struct {
	// OTLPEndpoint is the OTLP receiver's URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes it (http://collector:4318;
	// for http/protobuf /v1/traces is appended to its path). Empty:
	// tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and then the exporter
	// reads them (and the other OTEL_EXPORTER_OTLP_* variables: headers,
	// certificates, timeout) itself.
	OTLPEndpoint string `koanf:"otlp_endpoint"`
	// Protocol is http/protobuf or grpc. Empty (the default): the one
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
	// names, else http/protobuf (protocol).
	Protocol string `koanf:"protocol"`
	// SampleRatio is the fraction of new traces kept, 0 to 1; a request
	// that comes with a traceparent follows its caller's decision
	// (parent-based).
	SampleRatio float64 `koanf:"sample_ratio"`
	// ServiceName is the service.name of the spans' resource.
	ServiceName string `koanf:"service_name"`
}

// The tracing protocols.
const (
	protocolHTTP = "http/protobuf"
	protocolGRPC = "grpc"
	// protocolJSON is the OTLP protocol the Go exporter does not send.
	protocolJSON = "http/json"
)

// The standard variables that name the OTLP protocol, the traces' own
// first: the OpenTelemetry specification's order.
var protocolVariables = []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"}

// defaultTracing is tracing off, and what it does once an endpoint is
// set: the protocol the standard variables name, else OTLP/HTTP (what
// every collector listens for, on 4318); every trace kept (a proxy's
// request rate is an LLM API's, far below what a collector takes; lower
// it for a busy fleet), named meterproxy.
func defaultTracing() TracingConfig {
	return TracingConfig{SampleRatio: 1, ServiceName: "meterproxy"}
}

// protocol is the protocol spans are sent in: tracing.protocol when set,
// else the first of protocolVariables set, else http/protobuf; and the
// key or variable that chose it ("" for the default). A value other than
// http/protobuf or grpc is an error that names its variable: http/json,
// which the Go exporter does not send, too.
func (c TracingConfig) protocol(getenv func(string) string) (proto, from string, err error) {
	if c.Protocol != "" {
		return c.Protocol, "tracing.protocol", nil
	}
	for _, name := range protocolVariables {
		switch v := getenv(name); v {
		case "":
			continue
		case protocolHTTP, protocolGRPC:
			return v, name, nil
		case protocolJSON:
			return "", name, fmt.Errorf("is %s, which the OpenTelemetry Go exporter does not send: set %s or %s "+
				"(here, or in tracing.protocol, which takes precedence)", protocolJSON, protocolHTTP, protocolGRPC)
		default:
			return "", name, fmt.Errorf("must be %s or %s, got %q", protocolHTTP, protocolGRPC, v)
		}
	}
	return protocolHTTP, "", nil
}

// validate reports each problem of the section under its key, and, when
// tracing is on with no tracing.protocol, a protocol variable's bad value
// under the variable's name.
func (c TracingConfig) validate(p *configcheck.Problems, getenv func(string) string) {
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		switch {
		case err != nil:
			p.Add("tracing.otlp_endpoint", "is not a URL: %v", err)
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			p.Add("tracing.otlp_endpoint", "must be an http:// or https:// URL with a host (http://collector:4318), got %q", c.OTLPEndpoint)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			p.Add("tracing.otlp_endpoint", "must have no user, query or fragment; set headers with OTEL_EXPORTER_OTLP_HEADERS")
		}
	}
	switch {
	case c.Protocol != "" && c.Protocol != protocolHTTP && c.Protocol != protocolGRPC:
		p.Add("tracing.protocol", "must be %s, %s, or empty (from %s or %s, else %s), got %q",
			protocolHTTP, protocolGRPC, protocolVariables[0], protocolVariables[1], protocolHTTP, c.Protocol)
	case c.Protocol == "" && c.enabled(getenv):
		if _, from, err := c.protocol(getenv); err != nil {
			p.Add(from, "%v", err)
		}
	}
	if math.IsNaN(c.SampleRatio) || c.SampleRatio < 0 || c.SampleRatio > 1 {
		p.Add("tracing.sample_ratio", "must be between 0 and 1, got %v", c.SampleRatio)
	}
	if c.ServiceName == "" {
		p.Add("tracing.service_name", "must not be empty")
	}
}

// enabled reports whether traces are exported: an endpoint is set, in
// the section or in the standard variables.
func (c TracingConfig) enabled(getenv func(string) string) bool {
	return c.OTLPEndpoint != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracerProvider is the tracer provider c describes, exporting in
// batches; nil when tracing is off. Shut it down after the server
// drained, so the last spans go out.
func newTracerProvider(ctx context.Context, c TracingConfig, getenv func(string) string, version string) (*sdktrace.TracerProvider, error) {
	if !c.enabled(getenv) {
		return nil, nil
	}
	proto, _, err := c.protocol(getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err) // validated: never
	}
	exp, err := newExporter(ctx, c, proto)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL,
			semconv.ServiceName(c.ServiceName), semconv.ServiceVersion(version))),
	), nil
}

// newExporter is the OTLP exporter of protocol proto, to c's endpoint
// when set (else the exporter's reading of OTEL_EXPORTER_OTLP_*). It does
// not connect: a receiver that is down loses spans, never a request.
func newExporter(ctx context.Context, c TracingConfig, proto string) (sdktrace.SpanExporter, error) {
	if proto == protocolGRPC {
		var opts []otlptracegrpc.Option
		if c.OTLPEndpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.OTLPEndpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil {
			return nil, err // validated: never
		}
		opts = append(opts, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path.Join("/", u.Path, "v1/traces")))
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	return otlptracehttp.New(ctx, opts...)
}

// tracingShutdown is how long the tracer provider has to send its last
// spans once the server drained.
const tracingShutdown = 5 * time.Second

// shutdownTracing sends what tp still holds and stops it; tp may be nil.
// A receiver that does not take them is logged: the proxy has stopped
// cleanly all the same.
func shutdownTracing(ctx context.Context, tp *sdktrace.TracerProvider, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdown)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing_flush_failed", slog.String("error", err.Error()))
	}
}
