package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// Server runs the proxy listener and the admin listener.
type Server struct {
	grace time.Duration
	proxy *http.Server
	admin *http.Server
	log   *slog.Logger
	ready atomic.Bool
}

// NewServer returns a Server for h, with /healthz, /readyz and /metrics
// (from gatherer) on the admin listener.
func NewServer(cfg ServerConfig, h http.Handler, gatherer prometheus.Gatherer, log *slog.Logger) *Server {
	s := &Server{grace: cfg.ShutdownGrace, log: log}
	r := chi.NewRouter()
	r.Handle("/*", h)
	s.proxy = newHTTPServer(r, log)
	a := chi.NewRouter()
	a.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	a.Get("/readyz", s.readyz)
	a.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	s.admin = newHTTPServer(a, log)
	return s
}

// newHTTPServer bounds everything but the response: streams may run long,
// so there is no WriteTimeout.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Ready reports whether /readyz answers 200.
func (s *Server) Ready() bool { return s.ready.Load() }

// Run serves on the two listeners until ctx ends, then drains: /readyz turns
// false, the proxy listener closes, and requests in progress (admitted or
// held) get server.shutdown_grace to finish before their connections are
// closed. It returns nil after a clean drain.
func (s *Server) Run(ctx context.Context, proxyLn, adminLn net.Listener) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve(s.proxy, proxyLn) })
	g.Go(func() error { return serve(s.admin, adminLn) })
	s.ready.Store(true)
	s.log.Info("serving", slog.String("listen", proxyLn.Addr().String()), slog.String("admin_listen", adminLn.Addr().String()))
	g.Go(func() error {
		<-gctx.Done()
		s.ready.Store(false)
		s.log.Info("draining", slog.Duration("grace", s.grace))
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.grace)
		defer cancel()
		err := s.proxy.Shutdown(shutdownCtx)
		if err != nil {
			s.log.Warn("grace_expired", slog.String("error", err.Error()))
			err = s.proxy.Close()
		}
		return errors.Join(err, s.admin.Close())
	})
	return g.Wait()
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
