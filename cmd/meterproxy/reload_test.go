package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testReloader is a reloader over a real admitter (in-process store) and
// handler, started on a config file the test rewrites.
type testReloader struct {
	*reloader
	path string
	reg  *prometheus.Registry
	logs *bytes.Buffer
}

func newTestReloader(t *testing.T, yaml string, environ []string) *testReloader {
	t.Helper()
	path := writeConfig(t, yaml)
	src := source{path: path, environ: environ, getenv: lookupIn(environ)}
	cfg, err := loadConfig(path, environ, src.getenv)
	if err != nil {
		t.Fatal(err)
	}
	classifier, err := checkServable(cfg, src.getenv)
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	reg := prometheus.NewRegistry()
	admitter, err := quota.New(cfg.quota(), quota.Deps{Callers: cfg.Callers, Log: log, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admitter.Close() })
	transport := proxy.NewTransport(cfg.Upstream, admitter.InFlightLimit())
	t.Cleanup(transport.CloseIdleConnections)
	h, err := proxy.NewHandler(cfg.proxy(), proxy.Deps{Live: live(cfg, classifier), Admitter: admitter, Transport: transport, Log: log, Registry: reg,
		AccountKeys: cfg.accountKeys(src.getenv)})
	if err != nil {
		t.Fatal(err)
	}
	return &testReloader{reloader: newReloader(cfg, src, admitter, h, reg, log), path: path, reg: reg, logs: logs}
}

// reloadTo rewrites the file with yaml and reloads it.
func (r *testReloader) reloadTo(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(r.path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	r.reload("test")
}

// reloadYAML is a config file on fixed loopback ports (the reloader never
// listens) with the upstream section's fields up, the other top-level
// sections extra and one caller, app, whose key is APP_KEY.
func reloadYAML(up, extra string) string {
	return `server: {listen: "127.0.0.1:8080", admin_listen: "127.0.0.1:9090"}
upstream: {url: "http://127.0.0.1:1"` + up + `}
` + extra + `callers:
  - {name: app, key_env: APP_KEY, class: interactive}
`
}

// TestReloadAppliesWholeOrNothing: a reload applies the file when what it
// changes may change live, and otherwise applies nothing of it: a file that
// changes a section that applies only at start is refused whole
// (needs_restart), logged naming the changed keys and counted; an invalid file
// is refused (failure). Before issue 21 (item 3) the live part of a
// needs-restart file was applied beside the running restart-only sections:
// the running provider key with the file's unknown_callers: forward, an
// open relay.
func TestReloadAppliesWholeOrNothing(t *testing.T) {
	const providerKey = "sk-provider-unit-secret"
	environ := []string{"APP_KEY=sk-app"}
	withKey := reloadYAML(", api_key: "+providerKey, "classify: {unknown_callers: reject}\n")
	plain := reloadYAML("", "")
	tests := []struct {
		name, from, to string
		want           string   // the result
		keys           []string // for needs_restart: the changed keys, named
	}{
		{"the provider key dropped, unknown callers forwarded", withKey,
			reloadYAML("", "classify: {unknown_callers: forward}\n"), reloadNeedsRestart, []string{"upstream.api_key"}},
		{"a live change beside a restart-only one", plain,
			reloadYAML("", "classes: {bulk: {share: 0.1}}\nlog: {level: debug}\n"), reloadNeedsRestart, []string{"log.level"}},
		{"every restart-only section", plain,
			strings.Replace(reloadYAML(`, refill: window`, "store: {key_prefix: other}\nlog: {format: text}\n"), "8080", "8081", 1),
			reloadNeedsRestart, []string{"server.listen", "upstream.refill", "store.key_prefix", "log.format"}},
		{"the one key a newcomer changed", plain,
			strings.Replace(plain, "}\nupstream", ", shutdown_grace: 7s}\nupstream", 1), reloadNeedsRestart, []string{"server.shutdown_grace"}},
		{"live changes only", withKey,
			reloadYAML(", api_key: "+providerKey, "classify: {unknown_callers: reject, header: X-Class}\nclasses: {bulk: {share: 0.1}}\nmode: shadow\n"), reloadSuccess, nil},
		{"inject_stream_usage is live", plain, reloadYAML(", inject_stream_usage: true", ""), reloadSuccess, nil},
		// Issue 25: prices are quota's, and change live.
		{"prices are live", plain, reloadYAML("", "prices:\n  - {match: [gpt-4o], input: 2.5, output: 10}\n"), reloadSuccess, nil},
		{"prices changed", reloadYAML("", "prices:\n  - {match: [gpt-4o], input: 2.5, output: 10}\n"),
			reloadYAML("", "prices:\n  - {match: [gpt-4o], input: 2.5, output: 10, flex: {input: 1.25}}\n"), reloadSuccess, nil},
		{"an invalid price", plain, reloadYAML("", "prices:\n  - {match: [gpt-4o], input: -2.5}\n"), reloadFailure, nil},
		{"an invalid file", plain, reloadYAML("", "classes: {bulk: {share: 2}}\n"), reloadFailure, nil},
		{"a caller whose key is not set", plain, plain + "  - {name: other, key_env: OTHER_KEY, class: bulk}\n", reloadFailure, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestReloader(t, tt.from, environ)
			before := r.current.version()
			r.reloadTo(t, tt.to)

			want := map[string]int{reloadSuccess: 0, reloadFailure: 0, reloadNeedsRestart: 0}
			want[tt.want] = 1
			exposition := "# HELP meterproxy_config_reloads_total Configuration reloads by result (success; failure: the file is invalid; needs_restart: the file changes a section that applies only at start). On failure and needs_restart the old configuration stays, whole.\n# TYPE meterproxy_config_reloads_total counter\n"
			for _, result := range []string{reloadFailure, reloadNeedsRestart, reloadSuccess} {
				exposition += fmt.Sprintf("meterproxy_config_reloads_total{result=%q} %d\n", result, want[result])
			}
			if err := testutil.GatherAndCompare(r.reg, strings.NewReader(exposition), "meterproxy_config_reloads_total"); err != nil {
				t.Error(err)
			}
			after := r.current.version()
			if served := r.handler.State().ConfigVersion; served != after {
				t.Errorf("the handler serves version %s, the reloader holds %s", served, after)
			}
			if applied := after != before; applied != (tt.want == reloadSuccess) {
				t.Errorf("result %s, but the configuration changed: %v", tt.want, applied)
			}
			logs := r.logs.String()
			reason := map[string]string{reloadFailure: "invalid", reloadNeedsRestart: "needs_restart"}[tt.want]
			if reason != "" && (!strings.Contains(logs, `"msg":"config_reload_refused"`) || !strings.Contains(logs, `"reason":"`+reason+`"`)) {
				t.Errorf("no config_reload_refused line with reason %s in\n%s", reason, logs)
			}
			if tt.keys != nil && !strings.Contains(logs, `"keys":["`+strings.Join(tt.keys, `","`)+`"]`) {
				t.Errorf("the refusal does not name keys %v:\n%s", tt.keys, logs)
			}
			if strings.Contains(logs, providerKey) {
				t.Error("the log holds the provider key")
			}
		})
	}
}

// TestReloadChecksTheEffectiveConfig: what the running proxy would run if
// it kept its restart-only sections and took the file's live ones is
// checked as a start is: the running provider key with the file's
// unknown_callers: forward fails the open-relay check, though the file
// alone passes it.
func TestReloadChecksTheEffectiveConfig(t *testing.T) {
	getenv := lookupIn([]string{"APP_KEY=sk-app"})
	current, err := loadConfig(writeConfig(t, reloadYAML(", api_key: sk-provider", "classify: {unknown_callers: reject}\n")), nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	file, err := loadConfig(writeConfig(t, reloadYAML("", "classify: {unknown_callers: forward}\n")), nil, getenv)
	if err != nil {
		t.Fatalf("the file alone is valid (pass-through): %v", err)
	}
	next := effective(current, file)
	if next.Upstream.APIKey != "sk-provider" || next.Classify.UnknownCallers != "forward" {
		t.Fatalf("effective config: api key set %v, unknown_callers %s; want the running key and the file's forward",
			next.Upstream.APIKey != "", next.Classify.UnknownCallers)
	}
	if _, err := checkServable(next, getenv); err == nil || !strings.Contains(err.Error(), "upstream.key_for_unknown_callers") {
		t.Fatalf("the effective config passed the start checks (%v); want the open-relay refusal", err)
	}
	if got := changedAtStart(next, file); len(got) != 1 || got[0] != "upstream.api_key" {
		t.Fatalf("keys the file changes at start: %v, want [upstream.api_key]", got)
	}
}
