package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
)

// source is where the configuration comes from, for reloads.
type source struct {
	path    string
	environ []string
	getenv  func(string) string
}

// serve builds the parts from cfg and runs them until ctx ends, then
// drains within server.shutdown_grace. SIGHUP and changes to the config
// file reload it.
func serve(ctx context.Context, cfg Config, src source, log *slog.Logger, stdout, stderr io.Writer) error {
	classifier, err := checkServable(cfg, src.getenv)
	if err != nil {
		return fmt.Errorf("invalid config, not starting:\n%w", err)
	}
	store := "in process (this replica alone)"
	if cfg.Store.Shared() {
		store = redactedURL(cfg.Store.RedisURL)
	}
	configFile := src.path
	if configFile == "" {
		configFile = "none (defaults and environment)"
	}
	upstream := cfg.Upstream.URL
	if len(cfg.Upstream.Accounts) > 0 {
		upstream = fmt.Sprintf("%d accounts", len(cfg.Upstream.Accounts))
	}
	log.Info("starting", slog.String("config", configFile), slog.String("version", buildVersion()),
		slog.String("goversion", runtime.Version()), slog.String("config_hash", cfg.configHash()),
		slog.String("mode", string(cfg.Mode)), slog.String("upstream", upstream), slog.String("store", store))
	if cfg.Upstream.APIKey == "" && len(cfg.Upstream.Accounts) == 0 && len(cfg.Callers) == 0 {
		// Only responses that spent this account move its state.
		log.Warn("upstream_headers_unread", slog.String("reason",
			"pass-through mode (no upstream.api_key) and no callers configured: no response is known to spend this account, "+
				"so the provider's rate-limit headers hold nothing; configure callers[] to have them read"))
	}
	logReplicasWarnings(log, cfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	admitter, err := quota.New(cfg.quota(), quota.Deps{Callers: cfg.Callers, Log: log, Registry: reg})
	if err != nil {
		return err
	}
	defer func() { _ = admitter.Close() }()
	admitter.Warm(ctx)
	// With a shared store one replica may hold the whole fleet bound.
	transport := proxy.NewTransport(cfg.Upstream, admitter.InFlightLimit())
	defer transport.CloseIdleConnections()

	tp, err := newTracerProvider(ctx, cfg.Tracing, src.getenv, buildVersion())
	if err != nil {
		return err
	}
	// After the server drained (deferred before it runs): the last
	// requests' spans go out.
	defer shutdownTracing(ctx, tp, log)
	access, err := proxy.OpenAccessLog(cfg.Log.Access, stdout, stderr, log)
	if err != nil {
		return fmt.Errorf("log.access: %w", err)
	}
	defer closeAccess(access) // after the drain: every request's line is written before the exit
	deps := proxy.Deps{
		Live: live(cfg, classifier), Admitter: admitter, Transport: transport, Log: log, Registry: reg,
		AccountKeys: cfg.accountKeys(src.getenv), Access: access,
	}
	if tp != nil {
		deps.Tracer = tp // a nil *TracerProvider in the interface would not be nil
	}
	h, err := proxy.NewHandler(cfg.proxy(), deps)
	if err != nil {
		return err
	}
	srv := proxy.NewServer(cfg.Server, h, proxy.Admin{Gatherer: reg, State: h.State}, log)

	var lc net.ListenConfig
	proxyLn, err := lc.Listen(ctx, "tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("server.listen: %w", err)
	}
	adminLn, err := lc.Listen(ctx, "tcp", cfg.Server.AdminListen)
	if err != nil {
		_ = proxyLn.Close()
		return fmt.Errorf("server.admin_listen: %w", err)
	}

	r := newReloader(cfg, src, admitter, h, reg, log)
	// The admitter outlives the server's drain: held requests are still
	// being admitted while the server waits for them.
	admitCtx, stopAdmitting := context.WithCancel(context.WithoutCancel(ctx))
	// Requests still queued when the grace is nearly over get a 503
	// (shutting_down) rather than a closed connection.
	srv.OnGraceEnding(stopAdmitting, h.ServiceTime)
	var g errgroup.Group
	g.Go(func() error { return admitter.Run(admitCtx) })
	hup := hangups()
	g.Go(func() error { r.watch(admitCtx, hup); return nil })
	g.Go(func() error { reopenOnHUP(admitCtx, access, log); return nil })
	err = srv.Run(ctx, proxyLn, adminLn)
	stopAdmitting()
	if lerr := g.Wait(); err == nil {
		err = lerr
	}
	log.Info("stopped")
	return err
}

// checkServable runs on cfg every check a configuration passes before it
// is served, at start and on a reload alike: each section's validation
// and what spans sections (Config.validate), and the classifier's
// compilation of the callers (whose keys come from getenv). It returns
// the classifier.
func checkServable(cfg Config, getenv func(string) string) (*classify.Classifier, error) {
	if err := cfg.validate(getenv); err != nil {
		return nil, err
	}
	return classify.New(cfg.Classify, cfg.Callers, getenv)
}

// live is the reloadable part of cfg.
func live(cfg Config, classifier *classify.Classifier) proxy.Live {
	return proxy.Live{
		Classifier: classifier, ClassHeader: cfg.Classify.Header, Refill: cfg.Upstream.Refill,
		InjectStreamUsage: cfg.Upstream.InjectStreamUsage, ConfigVersion: cfg.version(), ConfigHash: cfg.configHash(),
		Shadow:   cfg.Mode == ModeShadow,
		Sessions: proxy.NewSessionLimits(cfg.Classes, cfg.Callers),
	}
}
