package main

import (
	"context"
	"net"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// grpcReceiver is an OTLP/gRPC trace receiver: the official generated
// TraceService on a plaintext grpc.Server at 127.0.0.1, as the
// collector's otlp receiver serves it on 4317; it keeps the names of
// every span it received.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	names []string
}

func newGRPCReceiver(t *testing.T) *grpcReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &grpcReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis) // returns once Stop closed it
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return rc
}

// Export keeps the names of the spans req carries.
func (rc *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	names := spanNames(req.GetResourceSpans())
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.names = append(rc.names, names...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// received is the names of the spans received so far.
func (rc *grpcReceiver) received() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.names...)
}

// spanNames is the names of the spans of rs.
func spanNames(rs []*tracepb.ResourceSpans) []string {
	var names []string
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				names = append(names, s.GetName())
			}
		}
	}
	return names
}
