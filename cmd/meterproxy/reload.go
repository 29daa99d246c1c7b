package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// reloadSettle is how long the config file must be quiet before a change
// is read: editors and Kubernetes write in several steps.
const reloadSettle = 200 * time.Millisecond

// reloader applies a changed configuration while the proxy serves: callers,
// classes, account limits, the class header and token settings. Listen
// addresses, the upstream, the store and logging need a restart; a change
// to them is logged and not applied. An invalid file changes nothing.
type reloader struct {
	src      source
	admitter *quota.Admitter
	handler  *proxy.Handler
	log      *slog.Logger
	results  *prometheus.CounterVec
	current  Config
}

func newReloader(cfg Config, src source, admitter *quota.Admitter, h *proxy.Handler, reg prometheus.Registerer, log *slog.Logger) *reloader {
	results := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "meterproxy_config_reloads_total",
		Help: "Configuration reloads by result (success, failure: the old configuration stays).",
	}, []string{"result"})
	results.WithLabelValues("success")
	results.WithLabelValues("failure")
	return &reloader{src: src, admitter: admitter, handler: h, log: log, results: results, current: cfg}
}

// watch reloads on SIGHUP and when the config file changes, until ctx ends.
func (r *reloader) watch(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var changed <-chan fsnotify.Event
	var watchErrs <-chan error
	if r.src.path != "" {
		if w, err := fsnotify.NewWatcher(); err != nil {
			r.log.Warn("config_watch_failed", slog.String("error", err.Error()))
		} else {
			defer func() { _ = w.Close() }()
			// Watch the directory: editors and ConfigMaps replace the file.
			if err := w.Add(filepath.Dir(r.src.path)); err != nil {
				r.log.Warn("config_watch_failed", slog.String("error", err.Error()))
			}
			changed, watchErrs = w.Events, w.Errors
		}
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("sighup")
		case ev := <-changed:
			if filepath.Base(ev.Name) == filepath.Base(r.src.path) || filepath.Base(ev.Name) == "..data" {
				settle.Reset(reloadSettle)
			}
		case err := <-watchErrs:
			r.log.Warn("config_watch_failed", slog.String("error", err.Error()))
		case <-settle.C:
			r.reload("file_changed")
		}
	}
}

// reload reads the configuration again and applies what may change live.
func (r *reloader) reload(trigger string) {
	cfg, err := loadConfig(r.src.path, r.src.environ, r.src.getenv)
	if err == nil {
		var classifier *classify.Classifier
		if classifier, err = classify.New(cfg.Classify, cfg.Callers, r.src.getenv); err == nil {
			r.apply(cfg, classifier, trigger)
			return
		}
	}
	r.results.WithLabelValues("failure").Inc()
	r.log.Error("config_reload_refused", slog.String("trigger", trigger), slog.String("error", err.Error()),
		slog.String("kept_version", r.current.version()))
}

func (r *reloader) apply(cfg Config, classifier *classify.Classifier, trigger string) {
	if fixed := restartOnly(r.current, cfg); len(fixed) > 0 {
		r.log.Warn("config_needs_restart", slog.Any("sections", fixed))
		cfg.Server, cfg.Store, cfg.Log = r.current.Server, r.current.Store, r.current.Log
		inject := cfg.Upstream.InjectStreamUsage
		cfg.Upstream = r.current.Upstream
		cfg.Upstream.InjectStreamUsage = inject
	}
	r.admitter.Reconfigure(cfg.quota(), cfg.Callers)
	r.handler.Reconfigure(live(cfg, classifier))
	r.current = cfg
	r.results.WithLabelValues("success").Inc()
	r.log.Info("config_reloaded", slog.String("trigger", trigger), slog.String("version", cfg.version()))
}

// restartOnly names the sections that changed but apply only at start.
func restartOnly(old, cfg Config) []string {
	var fixed []string
	oldUp, newUp := old.Upstream, cfg.Upstream
	oldUp.InjectStreamUsage, newUp.InjectStreamUsage = false, false
	for _, s := range []struct {
		name     string
		old, new any
	}{{"server", old.Server, cfg.Server}, {"upstream", oldUp, newUp}, {"store", old.Store, cfg.Store}, {"log", old.Log, cfg.Log}} {
		if !reflect.DeepEqual(s.old, s.new) {
			fixed = append(fixed, s.name)
		}
	}
	return fixed
}
