package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestConfigHashIsTheFleets: issue 37 (item 5). Two replicas that differ
// only in what is a replica's own — listen addresses, the admin token,
// the log, the store's address — have one config hash, and so do two
// whose callers' keys differ in value only (a key is never hashed: the
// file names it by its variable); a limit, a class, a caller, a price or
// the mode that differs makes another.
func TestConfigHashIsTheFleets(t *testing.T) {
	const base = `server: {listen: "127.0.0.1:8080", admin_listen: "127.0.0.1:9090"}
upstream: {url: "http://127.0.0.1:1"}
store: {redis_url: "redis://:pw@10.0.0.1:6379/0", key_prefix: fleet}
account: {requests_per_minute: 600}
callers:
  - {name: app, key_env: APP_KEY, class: interactive}
`
	env := []string{"APP_KEY=sk-app-one"}
	hash := func(t *testing.T, yaml string, environ []string) string {
		t.Helper()
		cfg, err := loadConfig(writeConfig(t, yaml), environ, lookupIn(environ))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.configHash()
	}
	want := hash(t, base, env)
	if len(want) != 12 {
		t.Fatalf("config hash %q, want 12 hex digits", want)
	}
	same := map[string]string{
		"other listen addresses": strings.Replace(strings.Replace(base, "8080", "8081", 1), "9090", "9091", 1),
		"an admin token":         strings.Replace(base, `admin_listen: "127.0.0.1:9090"`, `admin_listen: "127.0.0.1:9090", admin_token: s3cret`, 1),
		"another log level":      base + "log: {level: debug, format: text}\n",
		"another Redis address":  strings.Replace(base, "10.0.0.1", "10.0.0.2", 1),
		"a tracing section":      base + "tracing: {service_name: other}\n",
	}
	for name, yaml := range same {
		if got := hash(t, yaml, env); got != want {
			t.Errorf("%s: config hash %s, want the fleet's %s", name, got, want)
		}
	}
	if got := hash(t, base, []string{"APP_KEY=sk-app-two"}); got != want {
		t.Errorf("a caller's key of another value: config hash %s, want %s (keys are never hashed)", got, want)
	}
	other := map[string]string{
		"a limit":        strings.Replace(base, "600", "601", 1),
		"a class":        base + "classes: {bulk: {max_wait: 7s}}\n",
		"a caller":       strings.Replace(base, "class: interactive", "class: bulk", 1),
		"a caller's key": strings.Replace(base, "APP_KEY", "OTHER_KEY", 1),
		"a price":        base + "prices:\n  - {match: [gpt-4o], input: 2.5, output: 10}\n",
		"the mode":       base + "mode: shadow\n",
		"the key prefix": strings.Replace(base, "key_prefix: fleet", "key_prefix: other", 1),
	}
	for name, yaml := range other {
		environ := append([]string{"OTHER_KEY=sk-app-one"}, env...)
		if got := hash(t, yaml, environ); got == want {
			t.Errorf("%s differs, yet the config hash is the same %s", name, got)
		}
	}
}

// TestVersionOf: the build's version is the stamped one, else the
// module's, else the VCS revision, else (devel).
func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}
	for _, tt := range []struct {
		name, stamped string
		bi            *debug.BuildInfo
		want          string
	}{
		{"stamped", "v1.4.0", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "v1.4.0"},
		{"the module's", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}, Settings: rev}, "v1.3.0"},
		{"the revision", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, "0123abcd"},
		{"a dirty tree", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: dirty}, "0123abcd+dirty"},
		{"nothing known", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"no build information", "", nil, "(devel)"},
	} {
		if got := versionOf(tt.stamped, tt.bi); got != tt.want {
			t.Errorf("%s: version %q, want %q", tt.name, got, tt.want)
		}
	}
}
