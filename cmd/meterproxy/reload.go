package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
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

// The results of a reload: the values of meterproxy_config_reloads_total's
// result label.
const (
	// reloadSuccess: the file was applied, whole.
	reloadSuccess = "success"
	// reloadFailure: the file is invalid, alone or as the configuration
	// the proxy would run; nothing of it was applied.
	reloadFailure = "failure"
	// reloadNeedsRestart: the file changes a section that applies only at
	// start; nothing of it was applied.
	reloadNeedsRestart = "needs_restart"
)

// reloader applies a changed configuration while the proxy serves, whole
// or not at all. Callers, classes, account limits, prices, the class
// header, mode, upstream.inject_stream_usage and upstream.accounts (while
// there are several) change live. Listen addresses, the rest
// of the upstream, the store, budgets and logging apply only at start: a file that
// changes them is refused whole (needs_restart), since applying only its
// live part would run a configuration nobody wrote and nothing validated
// (the running provider key beside the file's unknown_callers: forward is
// an open relay). An invalid file changes nothing either. Not safe for
// concurrent use: watch is its one goroutine.
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
		Help: "Configuration reloads by result (success; failure: the file is invalid; needs_restart: the file changes a section that applies only at start). On failure and needs_restart the old configuration stays, whole.",
	}, []string{"result"})
	for _, result := range []string{reloadSuccess, reloadFailure, reloadNeedsRestart} {
		results.WithLabelValues(result)
	}
	return &reloader{src: src, admitter: admitter, handler: h, log: log, results: results, current: cfg}
}

// hangups is SIGHUP's channel for watch, registered before serve says it
// is serving: a SIGHUP that arrives before watch runs is held for it, not
// taken by the default action, which ends the process.
func hangups() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// watch reloads on SIGHUP (hup, from hangups) and when the config file
// changes, until ctx ends.
func (r *reloader) watch(ctx context.Context, hup chan os.Signal) {
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

// reload reads the configuration again and applies it, or refuses it and
// keeps the running one whole, logging and counting why.
func (r *reloader) reload(trigger string) {
	cfg, classifier, err := prepareReload(r.current, r.src)
	if err != nil {
		result, reason, attrs := reloadFailure, "invalid", []any{slog.String("trigger", trigger)}
		if nr, ok := errors.AsType[*needsRestartError](err); ok {
			result, reason = reloadNeedsRestart, reloadNeedsRestart
			attrs = append(attrs, slog.Any("keys", nr.keys))
		}
		r.results.WithLabelValues(result).Inc()
		r.log.Error("config_reload_refused", append(attrs, slog.String("reason", reason),
			slog.String("error", err.Error()), slog.String("kept_config_hash", r.current.configHash()))...)
		return
	}
	if err := r.handler.ReconfigureAccounts(cfg.Upstream, cfg.accountKeys(r.src.getenv)); err != nil {
		r.results.WithLabelValues(reloadFailure).Inc()
		r.log.Error("config_reload_refused", slog.String("trigger", trigger), slog.String("reason", "invalid"),
			slog.String("error", err.Error()), slog.String("kept_config_hash", r.current.configHash()))
		return
	}
	r.admitter.Reconfigure(cfg.quota(), cfg.Callers)
	r.handler.Reconfigure(live(cfg, classifier))
	keys := changedConfigKeys(r.current, cfg)
	previous := r.current.configHash()
	r.current = cfg
	r.results.WithLabelValues(reloadSuccess).Inc()
	r.log.Info("config_reloaded", slog.String("trigger", trigger), slog.Any("keys", keys),
		slog.String("config_hash", cfg.configHash()), slog.String("previous_config_hash", previous), slog.String("mode", string(cfg.Mode)))
}

// needsRestartError refuses a reload whose file changes sections that
// apply only at start.
type needsRestartError struct {
	// keys are the changed keys, dotted as written in the file
	// ("server.shutdown_grace").
	keys []string
}

func (e *needsRestartError) Error() string {
	return fmt.Sprintf("config: reload: %s changed, and apply only at start: nothing of the file was applied; restart to run it",
		strings.Join(e.keys, ", "))
}

// prepareReload reads the configuration from src again and returns what a
// proxy running current would run after applying it, with its classifier,
// checked as the start path checks a configuration (checkServable). The
// result is the file's configuration or an error: a file that changes a
// section that applies only at start is refused (a *needsRestartError),
// since the proxy would not be running what the file says.
func prepareReload(current Config, src source) (Config, *classify.Classifier, error) {
	file, err := loadConfig(src.path, src.environ, src.getenv)
	if err != nil {
		return Config{}, nil, err
	}
	next := effective(current, file)
	if keys := changedAtStart(next, file); len(keys) > 0 {
		return Config{}, nil, &needsRestartError{keys: keys}
	}
	classifier, err := checkServable(next, src.getenv)
	if err != nil {
		return Config{}, nil, err
	}
	return next, classifier, nil
}

// effective is the configuration a proxy started on current runs after
// applying file live: file's sections, but current's of those that apply
// only at start (see startOnly).
func effective(current, file Config) Config {
	next := file
	next.Server, next.Store, next.Log = current.Server, current.Store, current.Log
	next.Budgets = current.Budgets
	next.Upstream = current.Upstream
	next.Upstream.InjectStreamUsage = file.Upstream.InjectStreamUsage
	if len(current.Upstream.Accounts) > 0 && len(file.Upstream.Accounts) > 0 {
		// Accounts are added, changed and removed live; going from one
		// account to several, or back, changes upstream.url and needs a
		// restart.
		next.Upstream.Accounts = file.Upstream.Accounts
	}
	return next
}

// startOnly returns c's sections that apply only at start, by key:
// server, upstream (but for inject_stream_usage), store, budgets and log.
func (c Config) startOnly() map[string]any {
	up := c.Upstream
	up.InjectStreamUsage = false
	return map[string]any{"server": c.Server, "upstream": up, "store": c.Store, "budgets": c.Budgets, "log": c.Log}
}

// changedAtStart names the keys that apply only at start in which a and b
// differ ("server.shutdown_grace"), in the order the sections are written.
func changedAtStart(a, b Config) []string {
	var changed []string
	as, bs := a.startOnly(), b.startOnly()
	for _, name := range []string{"server", "upstream", "store", "budgets", "log"} {
		changed = append(changed, changedKeys(name, reflect.ValueOf(as[name]), reflect.ValueOf(bs[name]))...)
	}
	return changed
}
