package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/meterproxy/meterproxy/classify"
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
	// graceEnding, when set, runs when what is admitted after it could no
	// longer finish within shutdown_grace; lead says how long before the
	// end that is.
	graceEnding func()
	lead        func() time.Duration
	// sockets drains the WebSockets the proxy's handler relays, when it
	// does (Handler.DrainSockets): Shutdown forgets hijacked connections.
	sockets socketDrainer
}

// socketDrainer drains the sockets of a handler that opens them.
type socketDrainer interface{ DrainSockets(ctx context.Context) }

// OnGraceEnding sets f to run during the drain at the last moment a newly
// admitted request can still finish within server.shutdown_grace: lead()
// before its end (twice the recent mean service time, say), and at least a
// tenth of it, at most a second, before. That is the moment to refuse what
// is still queued with a clear 503, rather than admit requests the grace
// would cut. Call it before Run.
func (s *Server) OnGraceEnding(f func(), lead func() time.Duration) { s.graceEnding, s.lead = f, lead }

// Admin is what the admin listener serves besides health.
type Admin struct {
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// State, when set, serves /admin/state as JSON.
	State func() State
}

// NewServer returns a Server for h, with /healthz, /readyz, /metrics,
// /admin/state and the Go profiler (/debug/pprof/, pprof.go) on the
// admin listener; /admin/* and /debug/pprof/* require server.admin_token
// as a bearer token when it is set.
func NewServer(cfg ServerConfig, h http.Handler, admin Admin, log *slog.Logger) *Server {
	s := &Server{grace: cfg.ShutdownGrace, log: log}
	s.sockets, _ = h.(socketDrainer)
	r := chi.NewRouter()
	refusePprof(r)
	r.Handle("/*", h)
	s.proxy = newHTTPServer(r, log)
	// HTTP/1.1 and h2c (HTTP/2 with prior knowledge, no TLS), so clients
	// that multiplex need one connection for many requests.
	s.proxy.Protocols = new(http.Protocols)
	s.proxy.Protocols.SetHTTP1(true)
	s.proxy.Protocols.SetUnencryptedHTTP2(true)
	// Each stream may hold a body in memory until the budget says no;
	// bound the streams one connection may open (Go's default is 250).
	s.proxy.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: cfg.MaxConcurrentStreams}
	// Unknown callers' streams are bounded per connection as they come.
	s.proxy.ConnContext = withConnStreams
	a := chi.NewRouter()
	a.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	a.Get("/readyz", s.readyz)
	a.Handle("/metrics", promhttp.HandlerFor(admin.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	a.Route("/admin", func(r chi.Router) {
		r.Use(requireToken(cfg.AdminToken))
		if admin.State != nil {
			r.Get("/state", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				_ = enc.Encode(admin.State()) // the client may be gone
			})
		}
	})
	mountPprof(a, cfg.AdminToken)
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

// Run serves on the two listeners until ctx ends, then drains: /readyz turns
// false, the proxy listener closes, and requests in progress (admitted or
// held) get server.shutdown_grace to finish before their connections are
// closed — a WebSocket's turns in flight likewise, its socket closed 1001
// once they end (Handler.DrainSockets). It returns nil after a clean
// drain.
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
		if s.graceEnding != nil {
			stop := make(chan struct{})
			defer close(stop)
			go s.watchGrace(time.Now().Add(s.grace), stop)
		}
		var drained sync.WaitGroup
		if s.sockets != nil {
			drained.Go(func() { s.sockets.DrainSockets(shutdownCtx) })
		}
		err := s.proxy.Shutdown(shutdownCtx)
		drained.Wait()
		if err != nil {
			s.log.Warn("grace_expired", slog.String("error", err.Error()))
			err = s.proxy.Close()
		}
		return errors.Join(err, s.admin.Close())
	})
	return g.Wait()
}

// graceCheck is how often the drain re-reads the service time: it is
// learned as requests complete during the drain itself.
const graceCheck = 20 * time.Millisecond

// watchGrace runs graceEnding once the time left before deadline is no
// longer enough for a request admitted now, or stop closes first.
func (s *Server) watchGrace(deadline time.Time, stop <-chan struct{}) {
	t := time.NewTicker(graceCheck)
	defer t.Stop()
	for {
		lead := min(time.Second, s.grace/10)
		if s.lead != nil {
			lead = max(lead, s.lead())
		}
		if time.Until(deadline) <= lead+graceCheck {
			s.graceEnding()
			return
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// requireToken answers 401 unless the request carries token as a bearer
// token (the scheme matched case-insensitively, RFC 7235); an empty token
// lets everything through.
func requireToken(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			presented, _ := classify.BearerToken(r.Header.Get("Authorization"))
			got := sha256.Sum256([]byte(presented))
			if token != "" && subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="meterproxy admin"`)
				http.Error(w, "admin token required", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
