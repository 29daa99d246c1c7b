package quota

import (
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
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
	// Budgets is what holds for every spend budget: what a budgeted
	// request gets while the store fails.
	Budgets gate.BudgetsConfig `koanf:"budgets"`
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
		Budgets: gate.DefaultBudgets(),
	}
}

// shareEpsilon absorbs float noise such as 0.8+0.2 > 1.
const shareEpsilon = 1e-9

// maxOutputTPM bounds account.output_tokens_per_minute so the output
// bucket's arithmetic (package quota/store's outputBucket, in 1/60000
// token) stays exact in its take.lua's doubles; it is a thousand times
// Anthropic's largest tiers.
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
	validateModels(c, bad)
	validateAccounts(c, bad)
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
	c.Budgets.Check(bad, "budgets")
	if c.Store.Shared() && c.Store.SpendFile != "" {
		bad("store.spend_file", "is set beside %s, which keeps budgets' spend in Redis: the file would be neither read nor written, "+
			"and the spend it holds would not count; remove %s (or %s, to keep spend in the file)",
			configcheck.Ref("store.redis_url"), configcheck.Ref("store.spend_file"), configcheck.Ref("store.redis_url"))
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

// maxWait is class c's max_wait.
func (c ClassesConfig) maxWait(cl classify.Class) time.Duration {
	if cl == classify.Bulk {
		return c.Bulk.MaxWait
	}
	return c.Interactive.MaxWait
}

// ForAccount is the Config account name enforces: its own account section
// — with the top-level account.models, the pools every account shares,
// when it lists no models of its own — and the classes partitioned by
// what it serves and lends (classesFor). Without upstream.accounts, or
// for a name not configured, it is c.
func (c Config) ForAccount(name string) Config {
	for i, a := range c.Accounts {
		if a.Name != name {
			continue
		}
		acct := a.Account
		if acct.ExpectedReplicas == 0 {
			acct.ExpectedReplicas = c.Account.ExpectedReplicas
		}
		if len(acct.Models) == 0 {
			acct.Models = c.Account.Models
		}
		c.Account, c.Classes = acct, a.classesFor(c.Classes)
		c.accountKey = fmt.Sprintf("upstream.accounts[%d].account", i)
		c.Accounts = nil
		return c
	}
	return c
}

// MaxCharge is the most one request drawn on pool (as PoolAt names
// it: the account's for "" or a pool not configured) may be charged in
// tokens, and the key that sets it: the pool's max_request_tokens, or
// while that is 0 its tokens_per_minute, one minute's allowance. It is 0,
// no bound, when the pool does not enforce tokens.
func (c Config) MaxCharge(pool string) (limit int64, key string) {
	limit, key, _ = maxCharge(c, pool)
	return limit, key
}

// FlexFor says whether a request of class cl for model m is sent at the
// flex tier — its class sets service_tier: flex and one of its
// flex_models matches m (as account.models match: exactly, an Azure
// deployment regardless of case) — and how: the one rule of flex
// eligibility, which the proxy asks (Admitter.FlexFor) of every request
// that can carry a tier. A request with no model, or one longer than any
// pattern is matched against, is not. m is only called when the class
// sends anything at flex, so a request pays for finding its model only
// then.
func (c Config) FlexFor(cl classify.Class, m func() Model) (Flex, bool) {
	f := c.Classes.flex(cl)
	if f.ServiceTier != price.TierFlex {
		return Flex{}, false
	}
	match, ok := m().matcher()
	if !ok || !slices.ContainsFunc(f.FlexModels, match) {
		return Flex{}, false
	}
	tier := price.TierFlex
	if f.FlexFallback {
		tier = ""
	}
	return Flex{Fallback: f.FlexFallback, Tier: tier}, true
}

// Pool is the Config the pool named name enforces: the account's classes
// and store, and the pool's own numbers; the account's for "" or a name
// not configured.
func (c Config) Pool(name string) Config {
	for _, m := range c.Account.Models {
		if m.Name == name {
			c.Account = AccountConfig{RequestsPerMinute: m.RequestsPerMinute, TokensPerMinute: m.TokensPerMinute,
				MaxRequestTokens: m.MaxRequestTokens, OutputTokensPerMinute: m.OutputTokensPerMinute, MaxInFlight: m.MaxInFlight,
				AdaptiveInFlight: m.AdaptiveInFlight, MinInFlight: m.MinInFlight, ExpectedReplicas: c.Account.ExpectedReplicas}
			return c
		}
	}
	c.Account.Models = nil
	return c
}

// PoolFor names the pool a request for m draws on: the first
// account.models entry one of whose patterns matches it, else accountPool
// (the account's). An empty model (none found) is the account's.
func (c Config) PoolFor(m Model) string {
	match, ok := m.matcher()
	if !ok {
		return store.AccountPool
	}
	for _, pool := range c.Account.Models {
		if slices.ContainsFunc(pool.Match, match) {
			return pool.Name
		}
	}
	return store.AccountPool
}

// PriceGaps lists the traffic no price covers (price.Table.Gaps): the
// account.models patterns no one price pattern covers, then the account's
// own pool unless a price matches every model or account.models leaves
// the account none. A check-config warning each.
func (c Config) PriceGaps() []price.Gap {
	pools := make([][]string, len(c.Account.Models))
	for i, m := range c.Account.Models {
		pools[i] = m.Match
	}
	return c.Prices.Gaps(pools)
}

// Limits returns the fleet-wide limits.
func (c Config) Limits() store.Limits { return scaled(c, 1) }

// PerReplica returns the fleet limits divided by account.expected_replicas:
// what one replica enforces on its own (the in-process store, and the local
// fallback when Redis fails).
func (c Config) PerReplica() store.Limits { return scaled(c, c.Account.ExpectedReplicas) }

// withInFlight is l with in-flight bound inFlight, partitioned between
// the classes by their shares: the one derivation of BulkInFlight and
// ReserveInFlight, for max_in_flight and for an adaptive bound alike.
func (c ClassesConfig) withInFlight(l store.Limits, inFlight int64) store.Limits {
	l.InFlight = inFlight
	l.BulkInFlight = adaptive.Part(inFlight, c.Bulk.Share)
	l.ReserveInFlight = adaptive.Part(inFlight, c.Interactive.Reserve)
	return l
}
