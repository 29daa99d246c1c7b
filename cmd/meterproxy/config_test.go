package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExampleConfigIsTheDefaults keeps config.example.yaml honest: it
// documents every key with its default value.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	cfg, err := loadConfig("../../config.example.yaml", nil, lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	if def := defaultConfig(); !reflect.DeepEqual(cfg, def) {
		t.Errorf("config.example.yaml differs from the defaults:\n got %+v\nwant %+v", cfg, def)
	}
}

func TestLoadConfigRefusesBadInput(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		environ []string
		want    []string // each must appear in the error
	}{
		{"typo'd key", "server:\n  lisen: \":1\"\n", nil, []string{"server.lisen: unknown key"}},
		{"typo'd key in a list item", "callers:\n  - {name: a, key_env: K, clas: bulk}\n", []string{"K=secret"}, []string{"callers[0].clas: unknown key"}}, //nolint:misspell // deliberate typo under test
		{"negative share", "classes:\n  interactive: {share: -0.2}\n", nil, []string{"classes.interactive.share: must be between 0 and 1"}},
		{"shares over 1", "classes:\n  interactive: {share: 0.9}\n  bulk: {share: 0.2}\n", nil, []string{"classes.bulk.share: classes.interactive.share + classes.bulk.share must be <= 1"}},
		{"not a number", "account:\n  requests_per_minute: lots\n", nil, []string{"account.requests_per_minute"}},
		{"bad duration", "classes:\n  bulk: {max_wait: soon}\n", nil, []string{"classes.bulk.max_wait"}},
		{"bad class", "classify:\n  default_class: urgent\n", nil, []string{"classify.default_class"}},
		{"unknown env variable", "", []string{"METERPROXY_UPSTREAM_APIKEY=x"}, []string{"METERPROXY_UPSTREAM_APIKEY: environment variable matches no config key"}},
		{"bad env value", "", []string{"METERPROXY_ACCOUNT_MAX_IN_FLIGHT=-3"}, []string{"account.max_in_flight: must be > 0"}},
		// Issue 11 item 3: the provider key for anyone who reaches the proxy.
		{"open relay", "", []string{"METERPROXY_UPSTREAM_API_KEY=sk-provider"},
			[]string{"upstream.key_for_unknown_callers: upstream.api_key is set and classify.unknown_callers is forward"}},
		{"body limits", "server: {max_body_bytes: 1000, max_body_memory_bytes: 999, body_read_timeout: 0s, max_upload_bytes: -1, max_concurrent_streams: 0}\n", nil,
			[]string{"server.max_body_memory_bytes: must be >= server.max_body_bytes", "server.body_read_timeout: must be > 0",
				"server.max_upload_bytes: must be > 0", "server.max_concurrent_streams: must be > 0"}},
		// Issue 32: the write-progress deadline and unknown callers' streams.
		{"slow clients", "server: {write_stall_timeout: 500ms, max_unknown_caller_streams: 0}\n", nil,
			[]string{"server.write_stall_timeout: must be at least 1s", "server.max_unknown_caller_streams: must be > 0"}},
		// Typed enums refuse a value at load, by key (issue 12 item 4).
		{"enums", "mode: loud\nstore: {on_error: maybe}\nclassify: {unknown_callers: sometimes}\n", nil,
			[]string{`mode: must be enforce or shadow, got "loud"`, `store.on_error: must be local, open or closed, got "maybe"`,
				`classify.unknown_callers: must be "forward" or "reject", got "sometimes"`}},
		{"no hold bound", "upstream: {max_hold: 0s}\n", nil, []string{"upstream.max_hold: must be > 0"}},
		// Issue 37 item 3: budgets beside Redis.
		{"spend_file beside redis_url", "store: {redis_url: \"redis://127.0.0.1:6379/0\", spend_file: /var/lib/meterproxy/spend.json}\n", nil,
			[]string{"store.spend_file: is set beside store.redis_url, which keeps budgets' spend in Redis: the file would be neither read nor written",
				"remove store.spend_file (or store.redis_url, to keep spend in the file)"}},
		{"spend_file beside redis_url from the environment", "store: {spend_file: /var/lib/meterproxy/spend.json}\n",
			[]string{"METERPROXY_STORE_REDIS_URL=redis://127.0.0.1:6379/0"}, []string{"store.spend_file: is set beside store.redis_url"}},
		{"budgets.on_store_error", "budgets: {on_store_error: open}\n", nil, []string{`budgets.on_store_error: must be closed or local, got "open"`}},
		{"no budget timeout", "store: {budget_timeout: 0s}\n", nil, []string{"store.budget_timeout: must be > 0, got 0s"}},
		{"output budget", "account: {output_tokens_per_minute: -1}\n", nil, []string{"account.output_tokens_per_minute: must be between 0 (not enforced) and 1000000000, got -1"}},
		{"fairness and weight", "classes: {bulk: {fairness: random}}\ncallers:\n  - {name: a, key_env: K, class: bulk, weight: -2}\n", []string{"K=secret"},
			[]string{`classes.bulk.fairness: must be callers or fifo, got "random"`, "callers[0].weight: must be between 0 (= 1) and 1000, got -2"}},
		{"refill model", "upstream: {refill: linear}\n", nil, []string{`upstream.refill: must be auto, continuous or window, got "linear"`}},
		// Issue 25: budgets refuse by key.
		{"budgets", "classes: {bulk: {budget: {usd: 1000, per: year}}, interactive: {budget: {usd: -5, per: day, unpriced: maybe}}}\n" +
			"callers:\n  - {name: a, key_env: K, class: bulk, budget: {usd: 200, unpriced_apis: allow}}\n", []string{"K=secret"},
			[]string{`classes.bulk.budget.per: must be day or month, got "year"`, "classes.interactive.budget.usd: must be more than 0",
				`classes.interactive.budget.unpriced: must be refuse or allow, got "maybe"`, "callers[0].budget.per: must be day or month",
				`callers[0].budget.unpriced_apis: must be refuse or worst_case, got "allow"`}},
		// Issue 23 item 3: the provider's own base URL doubles the path.
		{"upstream.url ending in /v1", "upstream: {url: \"https://api.openai.com/v1/\"}\n", nil,
			[]string{`upstream.url: ends in /v1, which the callers' request paths already begin with (/v1/…): the upstream would be asked for /v1/v1/…; write "https://api.openai.com"`}},
		{"Azure upstream.url ending in /openai", "upstream: {url: \"https://example.openai.azure.com/openai\"}\n", nil,
			[]string{`upstream.url: ends in /openai`, `write "https://example.openai.azure.com"`}},
		// Issue 25: prices, each problem by key.
		{"prices", "prices:\n  - {match: [gpt-4o], inpt: 2.5, output: -1, flex: {input: .nan}, cached_input: 1, cache_read: 1}\n" +
			"  - {match: [\"gpt-4o*\"], input: lots}\n  - {match: [gpt-4o-mini], max_output: -3}\n  - {input: 1}\n", nil,
			[]string{"prices[0].inpt: unknown key", "prices[0].output: must be a price in USD per million tokens between 0 and 10000, got -1",
				"prices[0].flex.input: must be a price in USD per million tokens between 0 and 10000, got NaN",
				"prices[0].cache_read: prices[0].cached_input and prices[0].cache_read both price input read from the prompt cache",
				"prices[1].input: cannot parse value", `prices[2].match[0]: "gpt-4o-mini" can never match: prices[1].match[0] ("gpt-4o*")`,
				"prices[2].max_output: must be between 1 and", "prices[3].match: must list at least one model name or pattern"}},
		{"audio prices", "prices:\n  - {match: [gpt-realtime], input: 4, output: 16, audio_input: -32, audio_output: 20000}\n", nil,
			[]string{"prices[0].audio_input: must be a price in USD per million tokens between 0 and 10000, got -32",
				"prices[0].audio_output: must be a price in USD per million tokens between 0 and 10000, got 20000"}},
		// Issue 33 item 3: Realtime sessions per class and caller.
		{"max_sessions", "classes: {interactive: {max_sessions: -1}, bulk: {max_sessions: 1.5}}\n" +
			"callers:\n  - {name: a, key_env: K, class: bulk, max_sessions: -2}\n  - {name: b, key_env: L, class: bulk, max_sessions: lots}\n", []string{"K=secret", "L=other"},
			[]string{"classes.interactive.max_sessions: must be >= 0 (0 = no cap), got -1", "classes.bulk.max_sessions: must be a whole number, got 1.5",
				"callers[0].max_sessions: must be >= 0 (0 = no cap), got -2", "callers[1].max_sessions"}},
		{"every problem at once", "server:\n  lisen: x\nclasses:\n  interactive: {share: -1}\nlog: {level: loud}\n", nil,
			[]string{"server.lisen", "classes.interactive.share", "log.level"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, tt.yaml), tt.environ, lookupIn(tt.environ))
			if err == nil {
				t.Fatal("loadConfig accepted it")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestLoadConfigLayers(t *testing.T) {
	path := writeConfig(t, "upstream:\n  url: http://yaml.example\naccount:\n  requests_per_minute: 600\nclasses:\n  bulk: {max_wait: 5s}\n")
	environ := []string{
		"METERPROXY_UPSTREAM_API_KEY=sk-env",
		"METERPROXY_CLASSIFY_UNKNOWN_CALLERS=reject",
		"METERPROXY_ACCOUNT_REQUESTS_PER_MINUTE=1200",
		"METERPROXY_CLASSES_BULK_SHARE=0.1",
		"OTHER=ignored",
	}
	cfg, err := loadConfig(path, environ, lookupIn(environ))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream.URL != "http://yaml.example" || cfg.Upstream.APIKey != "sk-env" {
		t.Errorf("upstream = %+v, want the YAML url and the env key", cfg.Upstream)
	}
	if cfg.Account.RequestsPerMinute != 1200 || cfg.Classes.Bulk.Share != 0.1 {
		t.Errorf("env did not override: rpm %d, bulk share %g", cfg.Account.RequestsPerMinute, cfg.Classes.Bulk.Share)
	}
	if cfg.Classes.Bulk.MaxWait != 5*time.Second || cfg.Classes.Interactive.MaxWait != 2*time.Second {
		t.Errorf("max_wait bulk %s interactive %s, want 5s from YAML and the 2s default", cfg.Classes.Bulk.MaxWait, cfg.Classes.Interactive.MaxWait)
	}
	if len(cfg.Classify.Paths) != 1 || cfg.Classify.Paths[0].Prefix != "/v1/batches" {
		t.Errorf("default path rules lost: %+v", cfg.Classify.Paths)
	}
}

func TestCheckConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	path := writeConfig(t, "account: {requests_per_minute: 6000, max_in_flight: 100, expected_replicas: 4}\n")
	if err := run(t.Context(), []string{"check-config", "--config", path}, nil, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"requests/s", "100.00", "25.00", "bulk requests/s (own share)", "20.00",
		"in-flight bound", "transport connection limit (per host)", "29"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check-config output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCheckConfigPools: check-config shows each pool's numbers, and sizes
// the transport for every pool's in-flight bound together.
func TestCheckConfigPools(t *testing.T) {
	var out, errOut bytes.Buffer
	path := writeConfig(t, "account:\n  requests_per_minute: 6000\n  max_in_flight: 100\n  models:\n"+
		"    - {name: gpt-4o, match: [gpt-4o*], requests_per_minute: 1200, max_in_flight: 40}\n")
	if err := run(t.Context(), []string{"check-config", "--config", path}, nil, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{`pool default \(the account\)`, `pool gpt-4o \(account.models\[0\]\)`, `requests/s\s+20.00\s+20.00`,
		`in-flight bound\s+40\s+40`, `transport connection limit \(per host\)\s+-\s+154`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("check-config output lacks %s:\n%s", want, out.String())
		}
	}
}

// TestOpenRelayOptIn: the provider key with unknown callers forwarded is
// accepted when the operator says so, and needs no opt-in when unknown
// callers are refused.
func TestOpenRelayOptIn(t *testing.T) {
	for _, yaml := range []string{"upstream: {key_for_unknown_callers: true}\n", "classify: {unknown_callers: reject}\n"} {
		environ := []string{"METERPROXY_UPSTREAM_API_KEY=sk-provider"}
		if _, err := loadConfig(writeConfig(t, yaml), environ, lookupIn(environ)); err != nil {
			t.Errorf("%q: %v", yaml, err)
		}
	}
}

// TestAdminDefaultsToLoopback: /metrics and /admin/state answered on every
// interface by default (issue 11 item 8); the default binds loopback.
func TestAdminDefaultsToLoopback(t *testing.T) {
	host, _, err := net.SplitHostPort(defaultConfig().Server.AdminListen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("server.admin_listen defaults to %q, want a loopback address", defaultConfig().Server.AdminListen)
	}
}

// TestServerKeys: every server key, as a user writes it in the file or
// in the environment, sets its field, and a reload names each change by
// that key. The keys are a user contract; how the section's fields are
// grouped in Go is not.
func TestServerKeys(t *testing.T) {
	keys := []struct{ key, value string }{
		{"listen", ":18080"},
		{"admin_listen", "127.0.0.1:19090"},
		{"shutdown_grace", "31s"},
		{"max_body_bytes", "1000"},
		{"max_upload_bytes", "2000"},
		{"max_body_memory_bytes", "3000"},
		{"body_read_timeout", "2m"},
		{"max_concurrent_streams", "101"},
		{"max_unknown_caller_streams", "9"},
		{"write_stall_timeout", "31s"},
		{"max_socket_message_bytes", "500"},
		{"max_socket_messages_per_second", "99"},
		{"max_sockets_per_caller", "127"},
		{"socket_idle_timeout", "16m"},
		{"admin_token", "token"},
	}
	want := defaultConfig().Server
	want.Listen, want.AdminListen, want.ShutdownGrace = ":18080", "127.0.0.1:19090", 31*time.Second
	want.MaxBodyBytes, want.MaxUploadBytes, want.MaxBodyMemoryBytes, want.BodyReadTimeout = 1000, 2000, 3000, 2*time.Minute
	want.MaxConcurrentStreams, want.MaxUnknownCallerStreams, want.WriteStallTimeout = 101, 9, 31*time.Second
	want.MaxSocketMessageBytes, want.MaxSocketMessagesPerSecond, want.MaxSocketsPerCaller, want.SocketIdleTimeout = 500, 99, 127, 16*time.Minute
	want.AdminToken = "token"

	yaml, environ, changed := "server:\n", []string(nil), []string(nil)
	for _, k := range keys {
		yaml += "  " + k.key + ": " + strconv.Quote(k.value) + "\n"
		environ = append(environ, "METERPROXY_SERVER_"+strings.ToUpper(k.key)+"="+k.value)
		changed = append(changed, "server."+k.key)
	}
	for _, tt := range []struct {
		name    string
		path    string
		environ []string
	}{
		{"file", writeConfig(t, yaml), nil},
		{"environment", "", environ},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(tt.path, tt.environ, lookupIn(tt.environ))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Server, want) {
				t.Errorf("server =\n%+v\nwant\n%+v", cfg.Server, want)
			}
			if got := changedKeys("server", reflect.ValueOf(defaultConfig().Server), reflect.ValueOf(cfg.Server)); !slices.Equal(got, changed) {
				t.Errorf("changed keys %v, want %v", got, changed)
			}
		})
	}
}
