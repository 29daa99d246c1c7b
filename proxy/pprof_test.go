package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/prometheus/client_golang/prometheus"
)

// TestPprofOnTheAdminListenerOnly: the profiler answers on the admin
// listener behind server.admin_token — 401 without it, 200 with it —
// and the proxy listener neither serves it nor forwards a caller's keyed
// request for it upstream.
func TestPprofOnTheAdminListenerOnly(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{})
	p := newTestProxy(t, proxyOpts{upstream: fake, environ: map[string]string{"K": "sk-known"},
		mutate: func(_ *Config, _ *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			*callers = []classify.Caller{{Name: "known", KeyEnv: "K"}}
		}})
	cfg := DefaultServerConfig()
	cfg.AdminToken = "admin-secret"
	srv := NewServer(cfg, p.handler, Admin{Gatherer: prometheus.NewRegistry()}, slog.New(slog.DiscardHandler))
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, pl, al) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	get := func(base, path, auth string) (int, string) {
		req := newRequest(t, http.MethodGet, "http://"+base+path, "")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		status, _, body := do(t, req)
		return status, string(body)
	}
	admin := al.Addr().String()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/heap",
		"/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.1"} {
		if status, _ := get(admin, path, ""); status != http.StatusUnauthorized {
			t.Errorf("admin %s without the token: %d, want 401", path, status)
		}
		if status, body := get(admin, path, "Bearer admin-secret"); status != http.StatusOK {
			t.Errorf("admin %s with the token: %d, want 200: %.200s", path, status, body)
		}
	}
	if _, body := get(admin, "/debug/pprof/", "Bearer admin-secret"); !strings.Contains(body, "goroutine") {
		t.Errorf("the index names no profiles: %.300s", body)
	}
	front := pl.Addr().String()
	for _, auth := range []string{"", "Bearer sk-known", "Bearer admin-secret"} {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof", "/debug/pprof/heap"} {
			if status, body := get(front, path, auth); status != http.StatusNotFound || strings.Contains(body, "goroutine") {
				t.Errorf("proxy listener %s (%q): %d, want 404: %.200s", path, auth, status, body)
			}
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests for the profiler forwarded upstream, want none", n)
	}
}
