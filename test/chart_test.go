package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/test/procs"
	"go.yaml.in/yaml/v3"
)

// The Helm chart's checks: `helm lint --strict` and `helm template` over
// the default values and the example values files, then the rendered
// manifests read back: the HPA ceiling arithmetic, probes and ports, the
// grace period, the security context, the config meterproxy accepts, and
// the NOTES warning. Helm is the pinned binary `make helm-install` puts in
// bin/ (HELM overrides it).

const chartDir = "charts/meterproxy"

// kubeVersion is the cluster helm template renders for (its default, 1.20,
// is below the chart's kubeVersion: the preStop sleep hook needs 1.30).
const kubeVersion = "1.31.0"

// helm runs the pinned helm binary in the module root.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root, err := procs.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(root, "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil { //nolint:gosec // HELM is the test runner's own choice of binary
		t.Fatalf("no helm at %s: run `make test-chart` (it builds the pinned Helm first) or set HELM", bin)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...) //nolint:gosec // as above; args are the test's own
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// manifests is a rendered chart, by kind and name.
type manifests map[string]map[string]any

func render(t *testing.T, args ...string) manifests {
	t.Helper()
	out, err := helm(t, append([]string{"template", "mp", chartDir, "--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	m := manifests{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("rendered manifests: %v", err)
		}
		if doc == nil {
			continue
		}
		m[fmt.Sprint(doc["kind"], "/", dig(doc, "metadata", "name"))] = doc
	}
	return m
}

// dig walks maps by key and lists by index ("0").
func dig(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func (m manifests) get(t *testing.T, key string) map[string]any {
	t.Helper()
	doc, ok := m[key]
	if !ok {
		t.Fatalf("no %s among %v", key, slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}))
	}
	return doc
}

// asInt reads a YAML number.
func asInt(t *testing.T, v any) int {
	t.Helper()
	n, ok := v.(int)
	if !ok {
		t.Fatalf("%v (%T) is not an integer", v, v)
	}
	return n
}

func TestChartLints(t *testing.T) {
	t.Parallel()
	for _, values := range []string{"", "examples/openai-fleet.yaml", "examples/anthropic-fixed.yaml"} {
		args := []string{"lint", "--strict", chartDir}
		if values != "" {
			args = append(args, "-f", filepath.Join(chartDir, values))
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

func TestChartManifests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		// the HPA's bounds (max 0: no HPA), the grace the pod needs
		// (preStop + shutdown_grace) and its terminationGracePeriodSeconds
		minReplicas, maxReplicas, needGrace, grace int
		env                                        []string // for the config's key_env callers
	}{
		// 200 in flight ÷ 4 expected replicas = 50 per process; ceil(200/50) = 4.
		{name: "defaults", minReplicas: 2, maxReplicas: 4, needGrace: 5 + 30, grace: 50},
		// perProcessInFlight 34: ceil(266/34) = 8.
		{name: "openai fleet", args: []string{"-f", chartDir + "/examples/openai-fleet.yaml"}, minReplicas: 2, maxReplicas: 8,
			needGrace: 35, grace: 50, env: []string{"CHAT_KEY=sk-a", "IMPORT_KEY=sk-b", "METERPROXY_UPSTREAM_API_KEY=sk-u"}},
		{name: "anthropic fixed", args: []string{"-f", chartDir + "/examples/anthropic-fixed.yaml"},
			needGrace: 10 + 120, grace: 150, env: []string{"SUPPORT_KEY=sk-a", "INDEXER_KEY=sk-b", "METERPROXY_UPSTREAM_API_KEY=sk-u"}},
		// A user may lower the ceiling.
		{name: "lowered", args: []string{"--set", "autoscaling.maxReplicas=3"}, minReplicas: 2, maxReplicas: 3, needGrace: 35, grace: 50},
		// 1m30s of grace and no preStop sleep.
		{name: "grace", args: []string{"--set", "config.server.shutdown_grace=1m30s", "--set", "preStopSleepSeconds=0"},
			minReplicas: 2, maxReplicas: 4, needGrace: 90, grace: 105},
		// Pools: 200 + 10 in flight over 4 expected replicas: 50 + ceil(10/4) = 53 per
		// process; ceil(210/53) = 4.
		{name: "pools", args: []string{"--set-json", `config.account.models=[{"name":"gpt-4o","match":["gpt-4o*"],"requests_per_minute":600,"max_in_flight":10}]`},
			minReplicas: 2, maxReplicas: 4, needGrace: 35, grace: 50},
		// Pools with perProcessInFlight set: ceil((200 + 100)/40) = 8.
		{name: "pools, per process set", args: []string{"--set-json", `config.account.models=[{"name":"gpt-4o","match":["gpt-4o*"],"requests_per_minute":600,"max_in_flight":100}]`,
			"--set", "autoscaling.perProcessInFlight=40"}, minReplicas: 2, maxReplicas: 8, needGrace: 35, grace: 50},
		// Several accounts (issue 26): 200 + 100 in flight; chat-project over
		// the top level's 4 expected replicas (50), batch-project over its
		// own 2 (50): 100 per process; ceil(300/100) = 3.
		{name: "accounts", args: accountsValues(), minReplicas: 2, maxReplicas: 3, needGrace: 35, grace: 50, env: accountsKeys},
		// Several accounts, one with a pool: 200 + 100 + 20 over
		// perProcessInFlight 40: ceil(320/40) = 8.
		{name: "accounts, a pool, per process set", args: append(accountsValues(
			"--set-json", `config.upstream.accounts[1].account.models=[{"name":"mini","match":["gpt-4o-mini*"],"requests_per_minute":600,"max_in_flight":20}]`),
			"--set", "autoscaling.perProcessInFlight=40"), minReplicas: 2, maxReplicas: 8, needGrace: 35, grace: 50, env: accountsKeys},
		// 1000 in flight, 3 expected: ceil(1000/3) = 334 per process; ceil(1000/334) = 3.
		{name: "uneven", args: []string{"--set", "config.account.max_in_flight=1000", "--set", "config.account.expected_replicas=3",
			"--set", "autoscaling.minReplicas=1"}, minReplicas: 1, maxReplicas: 3, needGrace: 35, grace: 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.args...)
			hpa, hasHPA := m["HorizontalPodAutoscaler/mp-meterproxy"]
			if tc.maxReplicas == 0 {
				if hasHPA {
					t.Error("autoscaling is off, yet an HPA is rendered")
				}
			} else {
				if !hasHPA {
					t.Fatal("no HPA rendered")
				}
				if got := asInt(t, dig(hpa, "spec", "maxReplicas")); got != tc.maxReplicas {
					t.Errorf("HPA maxReplicas %d, want %d", got, tc.maxReplicas)
				}
				if got := asInt(t, dig(hpa, "spec", "minReplicas")); got != tc.minReplicas {
					t.Errorf("HPA minReplicas %d, want %d", got, tc.minReplicas)
				}
			}
			deploy := m.get(t, "Deployment/mp-meterproxy")
			pod := dig(deploy, "spec", "template", "spec")
			grace := asInt(t, dig(pod, "terminationGracePeriodSeconds"))
			if grace != tc.grace || grace <= tc.needGrace {
				t.Errorf("terminationGracePeriodSeconds %d, want %d (above preStop + shutdown_grace = %d)", grace, tc.grace, tc.needGrace)
			}
			checkContainer(t, dig(pod, "containers", "0"), m.get(t, "ConfigMap/mp-meterproxy"), tc.env)
			checkSecurity(t, pod)
		})
	}
}

// accountsValues are the values of two provider accounts (the issue's),
// then more: chat-project lends to bulk, batch-project serves it and is
// sized for 2 replicas where the fleet is for 4.
func accountsValues(more ...string) []string {
	return append([]string{"--set", "config.classify.unknown_callers=reject", "--set-json", `config.upstream.accounts=[
		{"name":"chat-project","url":"https://api.openai.com","api_key_env":"OPENAI_KEY_CHAT",
		 "account":{"requests_per_minute":10000,"max_in_flight":200},"serves":["interactive"],"lends_to":["bulk"]},
		{"name":"batch-project","url":"https://api.openai.com","api_key_env":"OPENAI_KEY_BATCH",
		 "account":{"requests_per_minute":5000,"max_in_flight":100,"expected_replicas":2},"serves":["bulk"]}]`}, more...)
}

// accountsKeys are the environment accountsValues' accounts need.
var accountsKeys = []string{"OPENAI_KEY_CHAT=sk-chat", "OPENAI_KEY_BATCH=sk-batch"}

// TestChartAccountsConfig: with config.upstream.accounts the rendered
// config leaves out what meterproxy refuses beside them and the defaults
// set — upstream.url, the top-level account but its expected_replicas —
// and keeps the accounts as written.
func TestChartAccountsConfig(t *testing.T) {
	t.Parallel()
	cfgText, _ := dig(render(t, accountsValues()...).get(t, "ConfigMap/mp-meterproxy"), "data", "config.yaml").(string)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatal(err)
	}
	if u := dig(cfg, "upstream", "url"); u != nil {
		t.Errorf("upstream.url %v rendered beside upstream.accounts", u)
	}
	if a, _ := dig(cfg, "account").(map[string]any); len(a) != 1 || a["expected_replicas"] != 4 {
		t.Errorf("account %v rendered beside upstream.accounts, want expected_replicas (4) alone", a)
	}
	if got := dig(cfg, "upstream", "accounts", "1", "account", "max_in_flight"); got != 100 {
		t.Errorf("upstream.accounts[1].account.max_in_flight %v, want 100", got)
	}
}

// checkContainer: the probes hit /healthz and /readyz on the admin port,
// the ports are the ones the rendered config listens on, and meterproxy
// accepts that config.
func checkContainer(t *testing.T, c any, cm map[string]any, env []string) {
	t.Helper()
	cfgText, _ := dig(cm, "data", "config.yaml").(string)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatalf("config.yaml in the ConfigMap: %v", err)
	}
	ports := map[string]int{}
	for _, p := range dig(c, "ports").([]any) {
		ports[fmt.Sprint(dig(p, "name"))] = asInt(t, dig(p, "containerPort"))
	}
	if want := fmt.Sprintf(":%d", ports["admin"]); dig(cfg, "server", "admin_listen") != want {
		t.Errorf("server.admin_listen %v, the admin container port is %d", dig(cfg, "server", "admin_listen"), ports["admin"])
	}
	if want := fmt.Sprintf(":%d", ports["proxy"]); dig(cfg, "server", "listen") != want {
		t.Errorf("server.listen %v, the proxy container port is %d", dig(cfg, "server", "listen"), ports["proxy"])
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := dig(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
		if got := dig(c, probe, "httpGet", "port"); got != "admin" {
			t.Errorf("%s port %v, want the admin port", probe, got)
		}
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), meterproxyBin, "check-config", "--config", file)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("meterproxy refuses the chart's config: %v\n%s", err, out)
	}
}

// checkSecurity: non-root, read-only root filesystem, no privilege
// escalation, every capability dropped.
func checkSecurity(t *testing.T, pod any) {
	t.Helper()
	c := dig(pod, "containers", "0")
	for _, check := range []struct {
		what string
		got  any
		want any
	}{
		{"pod runAsNonRoot", dig(pod, "securityContext", "runAsNonRoot"), true},
		{"container runAsNonRoot", dig(c, "securityContext", "runAsNonRoot"), true},
		{"readOnlyRootFilesystem", dig(c, "securityContext", "readOnlyRootFilesystem"), true},
		{"allowPrivilegeEscalation", dig(c, "securityContext", "allowPrivilegeEscalation"), false},
		{"capabilities dropped", dig(c, "securityContext", "capabilities", "drop", "0"), "ALL"},
		{"seccomp", dig(pod, "securityContext", "seccompProfile", "type"), "RuntimeDefault"},
	} {
		if check.got != check.want {
			t.Errorf("%s = %v, want %v", check.what, check.got, check.want)
		}
	}
}

// TestChartRefusesBrokenValues: values that would break the fleet fail the
// render with the key named, and a config meterproxy would refuse is
// caught by check-config on the rendered ConfigMap.
func TestChartRefusesBrokenValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"grace too short", []string{"terminationGracePeriodSeconds=30"}, "terminationGracePeriodSeconds (30) must exceed"},
		{"min above ceiling", []string{"autoscaling.minReplicas=9"}, "autoscaling.minReplicas (9) is above maxReplicas (4)"},
		{"no in-flight bound", []string{"config.account.max_in_flight=0"}, "config.account.max_in_flight must be > 0"},
		{"an account without an in-flight bound", []string{"config.upstream.accounts[1].account.max_in_flight=0"},
			"config.upstream.accounts[1].account.max_in_flight must be > 0"},
		{"accounts and callers' keys forwarded", []string{"config.classify.unknown_callers=forward"},
			"config.classify.unknown_callers must be reject with config.upstream.accounts"},
		{"accounts and the provider key", []string{"secret.env.METERPROXY_UPSTREAM_API_KEY=sk-u"},
			"secret.env.METERPROXY_UPSTREAM_API_KEY is set beside config.upstream.accounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if strings.HasPrefix(tc.name, "an account") || strings.HasPrefix(tc.name, "accounts") {
				args = accountsValues()
			}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := helm(t, append([]string{"template", "mp", chartDir, "--kube-version", kubeVersion}, args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render with %v: %v, want a failure saying %q", tc.set, err, tc.want)
			}
		})
	}
	t.Run("config meterproxy refuses", func(t *testing.T) {
		m := render(t, "--set", "config.classes.bulk.share=1.5")
		cfgText, _ := dig(m.get(t, "ConfigMap/mp-meterproxy"), "data", "config.yaml").(string)
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte(cfgText), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), meterproxyBin, "check-config", "--config", file).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "classes.bulk.share") {
			t.Errorf("check-config on a share of 1.5: %v\n%s", err, out)
		}
	})
}

// TestChartConfigRollout: a config change changes the checksum that rolls
// the pods; with rollOnConfigChange off there is none (hot reload applies
// the change), and the config is mounted as a directory so it can.
func TestChartConfigRollout(t *testing.T) {
	t.Parallel()
	checksum := func(args ...string) any {
		return dig(render(t, args...).get(t, "Deployment/mp-meterproxy"), "spec", "template", "metadata", "annotations", "checksum/config")
	}
	a, b := checksum(), checksum("--set", "config.account.requests_per_minute=500")
	if a == nil || a == b {
		t.Errorf("checksum/config %v then %v: a config change must change it", a, b)
	}
	if c := checksum("--set", "rollOnConfigChange=false"); c != nil {
		t.Errorf("rollOnConfigChange=false still sets checksum/config %v", c)
	}
	mount := dig(render(t).get(t, "Deployment/mp-meterproxy"), "spec", "template", "spec", "containers", "0", "volumeMounts", "0")
	if dig(mount, "subPath") != nil || dig(mount, "mountPath") != "/etc/meterproxy" {
		t.Errorf("config mount %v: want the directory /etc/meterproxy, no subPath (a subPath never sees updates)", mount)
	}
}

// TestChartNotesWarnAboveTheCeiling renders NOTES.txt (helm template
// leaves it out, so a copy of the chart carries it as a plain template) and
// checks the warning appears only when maxReplicas is raised past the
// ceiling.
func TestChartNotesWarnAboveTheCeiling(t *testing.T) {
	t.Parallel()
	root, err := procs.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "meterproxy")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, chartDir))); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Helm parses whatever a template renders as YAML: carry the notes as
	// one block scalar.
	block := "notes: |\n  " + strings.ReplaceAll(string(notes), "\n", "\n  ")
	//nolint:gosec // dir is the test's own temporary directory
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-rendered.txt"), []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	notesFor := func(set ...string) string {
		args := []string{"template", "mp", dir, "--kube-version", kubeVersion, "--show-only", "templates/notes-rendered.txt"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Notes string }
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil || doc.Notes == "" {
			t.Fatalf("rendered notes %q: %v", out, err)
		}
		return doc.Notes
	}
	if out := notesFor(); strings.Contains(out, "WARNING: autoscaling.maxReplicas") || !strings.Contains(out, "ceiling 4") {
		t.Errorf("default NOTES:\n%s\nwant the ceiling (4) and no warning", out)
	}
	if out := notesFor("autoscaling.maxReplicas=12"); !strings.Contains(out, "WARNING: autoscaling.maxReplicas (12) is above the ceiling (4)") {
		t.Errorf("NOTES with maxReplicas 12:\n%s\nwant the warning", out)
	}
	if out := notesFor("config.store.redis_url="); !strings.Contains(out, "WARNING: store.redis_url is empty") {
		t.Errorf("NOTES without Redis:\n%s\nwant the warning", out)
	}
	// Several accounts: the ceiling is over their bounds together (3, as
	// TestChartManifests' "accounts" case works it out).
	args := []string{"template", "mp", dir, "--kube-version", kubeVersion, "--show-only", "templates/notes-rendered.txt"}
	out, err := helm(t, append(args, accountsValues("--set", "autoscaling.maxReplicas=5")...)...)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Notes string }
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ceiling 3 = the 2 accounts' max_in_flight, their models' with them, 300 ÷ 100 per process",
		"WARNING: autoscaling.maxReplicas (5) is above the ceiling (3)", "Raise an account's max_in_flight"} {
		if !strings.Contains(doc.Notes, want) {
			t.Errorf("NOTES with two accounts:\n%s\nwant %q", doc.Notes, want)
		}
	}
}

// TestChartMemoryLimitFollowsBodies: the container's memory limit is the
// budget of docs/security.md for config.server.max_body_memory_bytes — twice it plus
// 64 MiB — unless the values set one (issue 23: the chart's fixed 512Mi
// was below the 576 MiB its own default config needs). The default the
// chart falls back to when the key is absent is the proxy's own.
func TestChartMemoryLimitFollowsBodies(t *testing.T) {
	t.Parallel()
	const mi = 1 << 20
	budget := func(bodies int64) string { return fmt.Sprintf("%dMi", (2*bodies+64*mi+mi-1)/mi) }
	defaults := proxy.DefaultServerConfig().MaxBodyMemoryBytes
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"defaults", nil, budget(defaults)},
		{"the key absent", []string{"--set", "config.server.max_body_memory_bytes=null"}, budget(defaults)},
		{"a larger bound", []string{"--set", "config.server.max_body_memory_bytes=1073741824"}, budget(1 << 30)},
		{"an uneven bound", []string{"--set", "config.server.max_body_memory_bytes=100000000"}, budget(100000000)},
		{"set by the values", []string{"--set", "resources.limits.memory=3Gi"}, "3Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dig(render(t, tc.args...).get(t, "Deployment/mp-meterproxy"), "spec", "template", "spec", "containers", "0")
			if got := dig(c, "resources", "limits", "memory"); got != tc.want {
				t.Errorf("memory limit %v, want %s", got, tc.want)
			}
			if got := dig(c, "resources", "requests", "memory"); got != "128Mi" {
				t.Errorf("memory request %v, want the values' 128Mi", got)
			}
		})
	}
	if budget(defaults) != "576Mi" {
		t.Errorf("the default budget is %s; docs/security.md and values.yaml say 576Mi", budget(defaults))
	}
}
