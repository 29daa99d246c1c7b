package quota

import (
	"math"
	"net/url"
	"time"

	"github.com/meterproxy/meterproxy/quota/gate"

	"github.com/meterproxy/meterproxy/quota/store"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/price"
)

// Config is the admission configuration: the account, its partition between
// the classes, what models cost and where the counters live. The YAML keys
// are the koanf tags.
type Config struct {
	Account AccountConfig `koanf:"account"`
	Classes ClassesConfig `koanf:"classes"`
	// Prices price the models they match, first match wins (price.Table.For); a
	// model none matches costs 0. Reloadable, like the rest.
	Prices price.Table  `koanf:"prices"`
	Store  store.Config `koanf:"store"`
	// Accounts are upstream.accounts, when set: several provider accounts,
	// each with its own Account section (accounts.go); Account is then
	// only the defaults they share (expected_replicas).
	Accounts []Account `koanf:"-"`
	// accountKey is where Account comes from in the file: "" for the
	// top-level account section, upstream.accounts[i].account for one of
	// several (ForAccount), for the keys problems and refusals name.
	accountKey string
}

// acctKey is the key of c's Account section in the file (accountKey).
func (c Config) acctKey() string {
	if c.accountKey == "" {
		return "account"
	}
	return c.accountKey
}

// AccountConfig describes the provider account that every caller shares.
type AccountConfig struct {
	// RequestsPerMinute is the account's request allowance, for the whole fleet.
	RequestsPerMinute int64 `koanf:"requests_per_minute"`
	// TokensPerMinute is the account's token allowance, whole fleet,
	// partitioned like requests; 0 means metered but not enforced. For
	// Anthropic it is the input budget (ITPM).
	TokensPerMinute int64 `koanf:"tokens_per_minute"`
	// MaxRequestTokens is the most one request may be charged in tokens
	// while TokensPerMinute is enforced; a request above it is refused
	// before it is charged, 400 charge_too_large, and is charged nothing
	// (ChargeTooLargeError). 0 means TokensPerMinute, one minute's
	// allowance; it may not exceed it.
	MaxRequestTokens int64 `koanf:"max_request_tokens"`
	// OutputTokensPerMinute is the account's output-token budget, charged
	// the output responses report (Anthropic's OTPM): bulk is held while
	// it is below the interactive reserve, interactive while it is spent;
	// 0 means not enforced.
	OutputTokensPerMinute int64 `koanf:"output_tokens_per_minute"`
	// MaxInFlight bounds the requests in flight upstream, for the whole fleet.
	// With AdaptiveInFlight it is the ceiling the bound never passes.
	MaxInFlight int64 `koanf:"max_in_flight"`
	// AdaptiveInFlight makes the in-flight bound find itself between
	// MinInFlight and MaxInFlight from what the upstream completes
	// (package quota/adaptive): it grows while the upstream completes more work with
	// it, and comes down when latency rises with no more work done, or on
	// this account's upstream 429s, 5xx and timeouts (not a caller's own
	// key's). One bound for the fleet, kept in the store; false keeps
	// MaxInFlight as the bound.
	AdaptiveInFlight bool `koanf:"adaptive_in_flight"`
	// MinInFlight is the adaptive bound's floor, at most MaxInFlight; 0
	// means 4, adaptive.DefaultMinInFlight (below it one slow request is
	// most of a measurement).
	MinInFlight int64 `koanf:"min_in_flight"`
	// ExpectedReplicas is how many replicas normally share the account;
	// the in-process store, and the store.on_error local fallback, enforce
	// fleet limits divided by it.
	ExpectedReplicas int64 `koanf:"expected_replicas"`
	// Models are pools of their own for the models they match (first
	// match wins; see "Limits per model"); every other model draws on the
	// account.
	Models []modelPool `koanf:"models"`
}

// interactiveConfig is the interactive class: traffic a person waits on.
type interactiveConfig struct {
	// Share is interactive's part of the account, the fraction it is
	// sized for, 0..1.
	Share float64 `koanf:"share"`
	// Reserve is the fraction of the account bulk never takes, 0..1.
	Reserve float64 `koanf:"reserve"`
	// MaxWait is the longest a request may wait for admission before a
	// 429.
	MaxWait time.Duration `koanf:"max_wait"`
	// MaxQueue is how many requests may wait at once; more get an
	// immediate 429.
	MaxQueue int `koanf:"max_queue"`
	// Fairness is callers (the default: the class is shared between its
	// callers by their callers[].weight, each caller first come, first
	// served) or fifo (first come, first served, whoever sent).
	Fairness fairness `koanf:"fairness"`
	// Budget caps what the class's requests may cost per day or month,
	// fleet-wide, whoever sends them, as callers[].budget does a caller's;
	// the zero value is none.
	Budget classify.Budget `koanf:"budget"`
	// MaxSessions caps the class's Realtime sessions open at once on each
	// replica; past it the handshake gets a 429 (too_many_sessions). 0
	// means no cap (see "Realtime sessions").
	MaxSessions int `koanf:"max_sessions"`
	// ServiceTier is flex, to send the class's requests for FlexModels at
	// OpenAI's and Azure OpenAI's flex tier (see "The flex tier"), or
	// unset: the caller's tier. Anything else is refused.
	ServiceTier string `koanf:"service_tier"`
	// FlexModels are the models sent at flex, globs as
	// account.models[].match; required with ServiceTier flex.
	FlexModels []string `koanf:"flex_models"`
	// FlexFallback, true, resends a request at the default tier after
	// MaxWait without flex capacity (budgets reserve at its prices);
	// false answers the provider's 429.
	FlexFallback bool `koanf:"flex_fallback"`
}

// BulkConfig is the bulk class: imports, batch jobs, worker fleets.
type BulkConfig struct {
	// Share is the fraction of the account bulk may always take, 0..1.
	Share float64 `koanf:"share"`
	// Borrow lets bulk take unused capacity beyond its share, up to the
	// account minus the interactive reserve (never the reserve), while no
	// interactive request waits.
	Borrow bool `koanf:"borrow"`
	// MaxWait is the longest a request may wait for admission before a
	// 429.
	MaxWait time.Duration `koanf:"max_wait"`
	// MaxQueue is how many requests may wait at once; more get an
	// immediate 429.
	MaxQueue int `koanf:"max_queue"`
	// Fairness is callers (the default: the class is shared between its
	// callers by their callers[].weight, each caller first come, first
	// served) or fifo (first come, first served, whoever sent).
	Fairness fairness `koanf:"fairness"`
	// Budget caps what the class's requests may cost per day or month,
	// fleet-wide, whoever sends them, as callers[].budget does a caller's;
	// the zero value is none.
	Budget classify.Budget `koanf:"budget"`
	// MaxSessions caps the class's Realtime sessions open at once on each
	// replica; past it the handshake gets a 429 (too_many_sessions). 0
	// means no cap (see "Realtime sessions").
	MaxSessions int `koanf:"max_sessions"`
	// ServiceTier is flex, to send the class's requests for FlexModels at
	// OpenAI's and Azure OpenAI's flex tier (see "The flex tier"), or
	// unset: the caller's tier. Anything else is refused.
	ServiceTier string `koanf:"service_tier"`
	// FlexModels are the models sent at flex, globs as
	// account.models[].match; required with ServiceTier flex.
	FlexModels []string `koanf:"flex_models"`
	// FlexFallback, true, resends a request at the default tier after
	// MaxWait without flex capacity (budgets reserve at its prices);
	// false answers the provider's 429.
	FlexFallback bool `koanf:"flex_fallback"`
}

// ClassesConfig holds the two classes.
type ClassesConfig struct {
	// Interactive is the class of traffic a person waits on.
	Interactive interactiveConfig `koanf:"interactive"`
	// Bulk is the class of imports, batch jobs and worker fleets.
	Bulk BulkConfig `koanf:"bulk"`
}

// Enforced is what the configured store enforces: the fleet's limits with
// Redis, one replica's in process.
func (c Config) Enforced() store.Limits {
	if c.Store.Shared() {
		return c.Limits()
	}
	return c.PerReplica()
}

// gates is what the caller gates read of c.
func (c ClassesConfig) gates() gate.Classes {
	return gate.Classes{MaxQueue: [classify.NumClasses]int{c.Interactive.MaxQueue, c.Bulk.MaxQueue},
		Budget: [classify.NumClasses]classify.Budget{c.Interactive.Budget, c.Bulk.Budget}}
}

// DefaultConfig returns the defaults documented in config.example.yaml.
func DefaultConfig() Config {
	return Config{
		Account: AccountConfig{RequestsPerMinute: 10000, MaxInFlight: 200, ExpectedReplicas: 1, Models: []modelPool{}},
		Classes: ClassesConfig{
			Interactive: interactiveConfig{Share: 0.8, Reserve: 0.3, MaxWait: 2 * time.Second, MaxQueue: 1000, Fairness: fairCallers},
			Bulk:        BulkConfig{Share: 0.2, Borrow: true, MaxWait: 60 * time.Second, MaxQueue: 10000, Fairness: fairCallers},
		},
		Prices: []price.Price{},
		Store: store.Config{KeyPrefix: "meterproxy", OnError: store.OnErrorLocal, Timeout: 50 * time.Millisecond,
			BudgetTimeout: time.Second, Heartbeat: time.Second},
	}
}

// shareEpsilon absorbs float noise such as 0.8+0.2 > 1.
const shareEpsilon = 1e-9

// maxOutputTPM bounds account.output_tokens_per_minute so the output
// bucket's arithmetic (outputBucket, in 1/60000 token) stays exact in
// take.lua's doubles; it is a thousand times Anthropic's largest tiers.
const maxOutputTPM = 1_000_000_000

// Validate reports every problem at once, each naming its key relative to
// Config (account.…, classes.…, prices[…], store.…; see configcheck). It
// changes nothing.
func (c Config) Validate() error {
	var p configcheck.Problems
	bad := p.Add
	a := c.Account
	if a.ExpectedReplicas < 1 {
		bad("account.expected_replicas", "must be >= 1, got %d", a.ExpectedReplicas)
	}
	checkAllowance(bad, "account", a.requestsPerMinute(), a.TokensPerMinute, a.OutputTokensPerMinute, a.MaxInFlight, a.ExpectedReplicas)
	checkMaxCharge(bad, "account", a.MaxRequestTokens, a.TokensPerMinute)
	checkMinInFlight(bad, "account", a.MinInFlight, a.MaxInFlight)
	c.validateModels(bad)
	c.validateAccounts(bad)
	c.Prices.Validate(bad)
	ic, bc := c.Classes.Interactive, c.Classes.Bulk
	checkFraction(bad, "classes.interactive.share", ic.Share)
	checkFraction(bad, "classes.interactive.reserve", ic.Reserve)
	checkFraction(bad, "classes.bulk.share", bc.Share)
	if ic.Share+bc.Share > 1+shareEpsilon {
		bad("classes.bulk.share", "%s + %s must be <= 1, got %g", configcheck.Ref("classes.interactive.share"), configcheck.Ref("classes.bulk.share"), ic.Share+bc.Share)
	}
	if bc.Share+ic.Reserve > 1+shareEpsilon {
		bad("classes.interactive.reserve", "%s + %s must be <= 1 or bulk's own share eats the reserve, got %g",
			configcheck.Ref("classes.bulk.share"), configcheck.Ref("classes.interactive.reserve"), bc.Share+ic.Reserve)
	}
	checkWait(bad, "classes.interactive", ic.MaxWait, ic.MaxQueue)
	checkWait(bad, "classes.bulk", bc.MaxWait, bc.MaxQueue)
	for _, s := range []struct {
		key string
		n   int
	}{{"classes.interactive.max_sessions", ic.MaxSessions}, {"classes.bulk.max_sessions", bc.MaxSessions}} {
		if s.n < 0 {
			bad(s.key, "must be >= 0 (0 = no cap), got %d", s.n)
		}
	}
	ic.Budget.Check(bad, "classes.interactive.budget")
	bc.Budget.Check(bad, "classes.bulk.budget")
	c.Classes.flex(classify.Interactive).check(bad, "classes.interactive")
	c.Classes.flex(classify.Bulk).check(bad, "classes.bulk")
	for key, f := range map[string]fairness{"classes.interactive.fairness": ic.Fairness, "classes.bulk.fairness": bc.Fairness} {
		if err := configcheck.OneOf(f, fairnessModes...); f != "" && err != nil { // "" is the default, callers
			bad(key, "%v", err)
		}
	}
	if err := configcheck.OneOf(c.Store.OnError, store.OnErrorPolicies...); err != nil {
		bad("store.on_error", "%v", err)
	}
	if c.Store.KeyPrefix == "" {
		bad("store.key_prefix", "must not be empty")
	}
	urlOK, storeURL := true, (*url.URL)(nil)
	if c.Store.Shared() {
		_, u, err := store.ParseRedisURL(c.Store.RedisURL)
		if err != nil {
			bad("store.redis_url", "%v", err) // go-redis errors never echo the password
		}
		urlOK, storeURL = err == nil, u
	}
	if _, err := store.LoadTLSCA(c.Store.TLSCAFile, storeURL); urlOK && err != nil {
		bad("store.tls_ca_file", "%v", err)
	}
	if c.Store.Timeout <= 0 {
		bad("store.timeout", "must be > 0, got %s", c.Store.Timeout)
	}
	if c.Store.BudgetTimeout <= 0 {
		bad("store.budget_timeout", "must be > 0, got %s", c.Store.BudgetTimeout)
	}
	if c.Store.Heartbeat <= 0 {
		bad("store.heartbeat", "must be > 0, got %s", c.Store.Heartbeat)
	}
	return p.Err()
}

// noRequestLimit stands for "no request limit" in an adaptive pool that
// sets no requests_per_minute (a self-hosted server publishes none): a
// billion a second, more than any server answers, so only the adaptive
// bound binds, through the same windows as every other pool.
const noRequestLimit = 60_000_000_000

// requestsPerMinute is the request allowance the windows enforce:
// RequestsPerMinute, or with adaptive_in_flight and none set,
// noRequestLimit.
func (a AccountConfig) requestsPerMinute() int64 {
	if !a.RequestLimited() {
		return noRequestLimit
	}
	return a.RequestsPerMinute
}

// RequestLimited reports whether the account (or pool) limits requests a
// minute: false for an adaptive one that sets no requests_per_minute,
// whose bound is then its only limit.
func (a AccountConfig) RequestLimited() bool { return a.RequestsPerMinute != 0 || !a.AdaptiveInFlight }

// checkAllowance checks an account's or a pool's numbers, under key.
func checkAllowance(bad func(string, string, ...any), key string, rpm, tpm, otpm, maxInFlight, replicas int64) {
	if rpm <= 0 {
		bad(key+".requests_per_minute", "must be > 0 (or unset with adaptive_in_flight: no request limit), got %d", rpm)
	}
	if tpm < 0 {
		bad(key+".tokens_per_minute", "must be >= 0 (0 = not enforced), got %d", tpm)
	}
	if otpm < 0 || otpm > maxOutputTPM {
		bad(key+".output_tokens_per_minute", "must be between 0 (not enforced) and %d, got %d", maxOutputTPM, otpm)
	}
	if maxInFlight <= 0 {
		bad(key+".max_in_flight", "must be > 0, got %d", maxInFlight)
	} else if replicas >= 1 && maxInFlight < replicas {
		bad(key+".max_in_flight", "must be >= %s (%d) so every replica may send, got %d", configcheck.Ref("account.expected_replicas"), replicas, maxInFlight)
	}
}

// checkMaxCharge checks an account's or a pool's max_request_tokens,
// under key, against its tokens_per_minute tpm: a charge above a minute's
// allowance could not be carried in full (window.next), and the providers
// refuse such a request themselves.
func checkMaxCharge(bad func(string, string, ...any), key string, most, tpm int64) {
	switch {
	case most < 0:
		bad(key+".max_request_tokens", "must be >= 0 (0 = %s), got %d", configcheck.Ref(key+".tokens_per_minute"), most)
	case tpm > 0 && most > tpm:
		bad(key+".max_request_tokens", "must be <= %s (%d), a minute's allowance, got %d", configcheck.Ref(key+".tokens_per_minute"), tpm, most)
	}
}

// checkMinInFlight checks an account's or a pool's min_in_flight, under
// key: the adaptive bound's floor, at most its ceiling.
func checkMinInFlight(bad func(string, string, ...any), key string, floor, ceiling int64) {
	switch {
	case floor < 0:
		bad(key+".min_in_flight", "must be >= 0 (0 = %d), got %d", adaptive.DefaultMinInFlight, floor)
	case ceiling > 0 && floor > ceiling:
		bad(key+".min_in_flight", "must be <= %s (%d), got %d", configcheck.Ref(key+".max_in_flight"), ceiling, floor)
	}
}

func checkFraction(bad func(string, string, ...any), key string, v float64) {
	if math.IsNaN(v) || v < 0 || v > 1 {
		bad(key, "must be between 0 and 1, got %g", v)
	}
}

func checkWait(bad func(string, string, ...any), prefix string, wait time.Duration, queue int) {
	if wait <= 0 {
		bad(prefix+".max_wait", "must be > 0, got %s", wait)
	}
	if queue < 1 {
		bad(prefix+".max_queue", "must be >= 1, got %d", queue)
	}
}

// maxWait is class c's max_wait.
func (c ClassesConfig) maxWait(cl classify.Class) time.Duration {
	if cl == classify.Bulk {
		return c.Bulk.MaxWait
	}
	return c.Interactive.MaxWait
}
