package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Config is the whole configuration file. Each section belongs to the
// package that uses it; the koanf tags are the user-facing keys.
type Config struct {
	// Mode is enforce (the default: hold and refuse what admission says
	// to) or shadow: classify, meter and record what would have been held
	// or refused, but forward everything at once.
	Mode Mode `koanf:"mode"`
	// Server is the listening side: the addresses, the bounds on what a
	// client may send and hold, and the admin listener.
	Server proxy.ServerConfig `koanf:"server"`
	// Upstream is the provider side: where requests go, with which key,
	// and how the provider's answers and limits are read.
	Upstream proxy.UpstreamConfig `koanf:"upstream"`
	// Account is the provider account every caller shares: its limits,
	// whole fleet, and the pools of its models.
	Account quota.AccountConfig `koanf:"account"`
	// Prices are what models cost, in USD per million tokens, first match
	// wins; a model none matches costs $0.
	Prices price.Table `koanf:"prices"`
	// Classes are the two classes, interactive and bulk: their parts of
	// the account, how long their requests may wait, their budgets.
	Classes quota.ClassesConfig `koanf:"classes"`
	// Callers are the configured clients of the proxy, each known by its
	// key, with its class, its own caps and its budget.
	Callers []classify.Caller `koanf:"callers"`
	// Classify decides a request's class when its caller does not.
	Classify classify.Config `koanf:"classify"`
	// Store is where the counters live: in process, or Redis for a fleet.
	Store store.Config `koanf:"store"`
	// Budgets is what holds for every spend budget (each is
	// callers[].budget or classes.<class>.budget): what a budgeted
	// request gets while Redis fails.
	Budgets gate.BudgetsConfig `koanf:"budgets"`
	// Log is the process's log and the access log.
	Log LogConfig `koanf:"log"`
	// Tracing exports a span per request over OTLP.
	Tracing TracingConfig `koanf:"tracing"`
}

// Mode is how meterproxy applies its decisions: the top-level mode key.
type Mode string

// The modes.
const (
	// ModeEnforce holds and refuses what admission says to.
	ModeEnforce Mode = "enforce"
	// ModeShadow forwards everything at once and records what admission
	// would have decided.
	ModeShadow Mode = "shadow"
)

// modes are the mode values.
var modes = []Mode{ModeEnforce, ModeShadow}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another mode is refused at load, by key.
func (m *Mode) UnmarshalText(b []byte) error { return configcheck.SetOneOf(m, b, modes...) }

// LogConfig is the log section.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `koanf:"level"`
	// Format is auto (colour on a terminal, JSON otherwise), text or json.
	Format string `koanf:"format"`
	// Access is where the access log goes, one JSON line per request:
	// stdout, stderr, a file's path (appended to, created mode 0600,
	// reopened on SIGHUP), or off. A directory, or a path meterproxy
	// cannot write, refuses the start (accesslog.go).
	Access string `koanf:"access"`
}

// defaultConfig is the typed bottom layer of the configuration.
func defaultConfig() Config {
	q := quota.DefaultConfig()
	return Config{
		Mode:     ModeEnforce,
		Server:   proxy.DefaultServerConfig(),
		Upstream: proxy.DefaultUpstreamConfig(),
		Account:  q.Account,
		Prices:   q.Prices,
		Classes:  q.Classes,
		Callers:  []classify.Caller{},
		Classify: classify.DefaultConfig(),
		Store:    q.Store,
		Budgets:  q.Budgets,
		// The access log on stdout: where a Kubernetes log pipeline reads.
		Log:     LogConfig{Level: "info", Format: "auto", Access: proxy.AccessStdout},
		Tracing: defaultTracing(),
	}
}

func (c Config) quota() quota.Config {
	return quota.Config{Account: c.Account, Classes: c.Classes, Prices: c.Prices, Store: c.Store, Budgets: c.Budgets, Accounts: c.Upstream.QuotaAccounts()}
}

// accountKeys are the keys of upstream.accounts, by account name, from
// their api_key_env variables.
func (c Config) accountKeys(getenv func(string) string) map[string]string {
	keys := make(map[string]string, len(c.Upstream.Accounts))
	for _, a := range c.Upstream.Accounts {
		keys[a.Name] = getenv(a.APIKeyEnv)
	}
	return keys
}

// validateBesideAccounts checks what upstream.accounts asks of the rest
// of the configuration and of the environment: the proxy holds every
// account's key (from its api_key_env, which must be set), so callers'
// own keys never pass through — never to an account they were not issued
// for — and the single account's keys are not set beside them. The
// accounts themselves are checked by their owners: admission's part by
// quota, url and api_key_env by the proxy.
func (c Config) validateBesideAccounts(p *configcheck.Problems, getenv func(string) string) {
	if len(c.Upstream.Accounts) == 0 {
		return
	}
	if c.Classify.UnknownCallers == classify.UnknownForward {
		p.Add("classify.unknown_callers", "is forward, which passes an unknown caller's own key through; with upstream.accounts "+
			"the proxy sends each account's own key and a caller's key must never reach an account it was not issued for: "+
			"set classify.unknown_callers: reject and configure callers[]")
	}
	c.validateAccountsShape(p)
	for i, a := range c.Upstream.Accounts {
		if a.APIKeyEnv != "" && getenv(a.APIKeyEnv) == "" {
			p.Add(fmt.Sprintf("upstream.accounts[%d].api_key_env", i), "%s is unset or empty: the account's key must be in it", a.APIKeyEnv)
		}
	}
}

// validateAccountsShape checks that the single account's keys are not set
// beside upstream.accounts: what plan needs of them too.
func (c Config) validateAccountsShape(p *configcheck.Problems) {
	if len(c.Upstream.Accounts) == 0 {
		return
	}
	def := defaultConfig()
	if c.Upstream.APIKey != "" {
		p.Add("upstream.api_key", "is set beside upstream.accounts, whose keys are each account's api_key_env: remove it")
	}
	if c.Upstream.URL != def.Upstream.URL {
		p.Add("upstream.url", "is set beside upstream.accounts, whose URLs are each account's url: remove it")
	}
	top := c.Account
	top.ExpectedReplicas = def.Account.ExpectedReplicas // the keys the accounts share
	top.Models = def.Account.Models
	if !reflect.DeepEqual(top, def.Account) {
		p.Add("account", "is set beside upstream.accounts, whose limits are each account's account section "+
			"(only account.expected_replicas and account.models, which they share, may be set): move it into them")
	}
}

func (c Config) proxy() proxy.Config {
	return proxy.Config{Server: c.Server, Upstream: c.Upstream}
}

// envPrefix starts every environment override: METERPROXY_UPSTREAM_API_KEY
// sets upstream.api_key.
const envPrefix = "METERPROXY_"

// loadConfig layers typed defaults, the YAML file at path (if not empty)
// and METERPROXY_* variables from environ, then validates. Every unknown
// key and invalid value is reported at once, by key.
func loadConfig(path string, environ []string, getenv func(string) string) (Config, error) {
	return loadConfigFor(useServe, path, environ, getenv)
}

// use is what a command uses of the configuration, so it validates only
// that: plan and sweep do not serve, so neither asks for the callers' keys
// nor refuses the open relay that serving would be.
type use int

const (
	// useServe is serve and check-config: everything.
	useServe use = iota
	// usePlan is plan: the server, upstream, account and pool sections,
	// without the keys of callers or accounts.
	usePlan
	// useSweep is sweep: the server and upstream sections.
	useSweep
)

// loadConfigFor is loadConfig validating what u uses; the decoder still
// refuses every unknown key and ill-typed value.
func loadConfigFor(u use, path string, environ []string, getenv func(string) string) (Config, error) {
	def := defaultConfig()
	k := koanf.New(".")
	if err := k.Load(structs.Provider(def, "koanf"), nil); err != nil {
		return Config{}, fmt.Errorf("config: defaults: %w", err)
	}
	known := leafKeys(k)
	var errs []error
	if path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	envErrs, fromEnv, err := loadEnv(k, known, environ)
	if err != nil {
		return Config{}, err
	}
	errs = append(errs, envErrs...)
	cfg := def
	dec := &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc(),
			wholeNumbers),
		WeaklyTypedInput: true,
		ErrorUnused:      true,
		ZeroFields:       true,
		TagName:          "koanf",
	}
	var decoded []error
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{DecoderConfig: dec}); err != nil {
		decoded = decodeErrors(err)
	}
	errs = append(errs, decoded...)
	errs = append(errs, besideDecoded(cfg.validateFor(u, getenv), decoded)...)
	errs = namingSources(errs, fromEnv)
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// validate checks every section, each under its key in the file (the
// sections report keys relative to themselves; see configcheck), and what
// spans sections.
func (c Config) validate(getenv func(string) string) error { return c.validateFor(useServe, getenv) }

// validateFor is validate of what u uses.
func (c Config) validateFor(u use, getenv func(string) string) error {
	switch u {
	case useSweep:
		return c.proxy().Validate()
	case usePlan:
		var p configcheck.Problems
		c.Upstream.APIKey = "" // plan sends nothing: the key, from the file or the environment, is serve's business
		c.validateAccountsShape(&p)
		return errors.Join(c.proxy().Validate(), c.quota().Validate(), p.Err())
	}
	var p configcheck.Problems
	if c.Upstream.APIKey != "" && c.Classify.UnknownCallers == classify.UnknownForward && !c.Upstream.KeyForUnknownCallers {
		p.Add("upstream.key_for_unknown_callers", "upstream.api_key is set and "+
			"classify.unknown_callers is forward, so anyone who reaches the proxy, with no key or any key, "+
			"would spend the account under the provider key (and a capped caller could escape its cap by "+
			"dropping its own): set classify.unknown_callers: reject, or set "+
			"upstream.key_for_unknown_callers: true if that is what you want")
	}
	c.validateBesideAccounts(&p, getenv)
	if err := configcheck.OneOf(c.Mode, modes...); err != nil {
		p.Add("mode", "%v", err)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.Add("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "text", "json":
	default:
		p.Add("log.format", "must be auto, text or json, got %q", c.Log.Format)
	}
	c.Tracing.validate(&p, getenv)
	if err := validateAccess(c.Log.Access); err != nil {
		p.Add("log.access", "%v", err)
	}
	return errors.Join(
		c.proxy().Validate(), // server, upstream: sections at the top
		c.quota().Validate(), // account, prices, classes, store: sections at the top
		configcheck.Under("classify", c.Classify.Validate()),
		configcheck.Under("callers", classify.ValidateCallers(c.Callers, getenv)),
		p.Err())
}

// leafKeys returns the configurable keys: every flattened key of the
// defaults. Lists (callers, classify.paths) are leaves; their items are
// checked by the decoder.
func leafKeys(k *koanf.Koanf) map[string]bool {
	known := make(map[string]bool)
	for _, key := range k.Keys() {
		known[key] = true
	}
	return known
}

// loadEnv applies METERPROXY_* overrides. A variable is matched to a key by
// upper-casing the key and replacing dots with underscores; a variable that
// matches no key is an error, so a typo does not pass silently.
// It returns, beside the errors, the variable that set each key it set.
func loadEnv(k *koanf.Koanf, known map[string]bool, environ []string) ([]error, map[string]string, error) {
	byEnv := make(map[string]string, len(known))
	for key := range known {
		byEnv[envPrefix+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))] = key
	}
	var unknown []string
	fromEnv := map[string]string{}
	p := env.Provider(".", env.Opt{
		Prefix:      envPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			key, ok := byEnv[name]
			if !ok {
				unknown = append(unknown, name)
				return "", nil
			}
			fromEnv[key] = name
			return key, value
		},
	})
	if err := k.Load(p, nil); err != nil {
		return nil, nil, fmt.Errorf("config: environment: %w", err)
	}
	slices.Sort(unknown)
	errs := make([]error, 0, len(unknown))
	for _, name := range unknown {
		errs = append(errs, fmt.Errorf("%s: environment variable matches no config key", name))
	}
	return errs, fromEnv, nil
}

var (
	invalidKeysLine = regexp.MustCompile(`^'([^']*)' has invalid keys: (.+)$`)
	quotedKeyLine   = regexp.MustCompile(`^'([^']+)' (.+)$`)
)

// decodeErrors turns the decoder's report into one error per key, in the
// same "key: problem" form as Validate.
// wholeNumbers refuses a number with a fraction for an integer key
// (max_sessions: 1.5), which the decoder would cut to its whole part.
func wholeNumbers(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	if from.Kind() == reflect.Float64 || from.Kind() == reflect.Float32 {
		if f := reflect.ValueOf(data).Float(); f != math.Trunc(f) {
			return nil, fmt.Errorf("must be a whole number, got %g", f)
		}
	}
	return data, nil
}

func decodeErrors(err error) []error {
	var errs []error
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if m := invalidKeysLine.FindStringSubmatch(line); m != nil {
			for _, key := range strings.Split(m[2], ", ") {
				errs = append(errs, fmt.Errorf("%s: unknown key", strings.TrimPrefix(m[1]+"."+key, ".")))
			}
		} else if m := quotedKeyLine.FindStringSubmatch(line); m != nil {
			errs = append(errs, fmt.Errorf("%s: %s", m[1], m[2]))
		} else if line != "" && !strings.HasPrefix(line, "decoding failed") {
			errs = append(errs, errors.New(line))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// version identifies the effective configuration: the first 12 hex digits
// of the SHA-256 of its JSON form with every secret left out.
func (c Config) version() string {
	c.Upstream.APIKey, c.Server.AdminToken, c.Store.RedisURL = "", "", redactedURL(c.Store.RedisURL)
	b, err := json.Marshal(c)
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// redactedURL drops the userinfo (password) of a URL.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
