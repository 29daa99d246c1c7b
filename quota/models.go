package quota

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ModelPool is one entry of account.models: the models it matches draw on
// a pool of their own — its own windows, in-flight bound, class partition,
// upstream state and Redis keys — instead of the account's, as providers
// keep limits per model (OpenAI), per model class (Anthropic) or per
// deployment (Azure). The YAML keys are the koanf tags.
type ModelPool struct {
	// Name names the pool: its metric label, /admin/state entry and Redis
	// keys. [a-z0-9_.-], unique, not "default" (the account's label).
	Name string `koanf:"name"`
	// Match lists the model names it takes, * a wildcard for any run of
	// characters: the request's model field, or an Azure deployment.
	Match []string `koanf:"match"`
	// RequestsPerMinute is the pool's request allowance, as the
	// account's is for the account.
	RequestsPerMinute int64 `koanf:"requests_per_minute"`
	// TokensPerMinute is the pool's token allowance, as the account's is
	// for the account; 0 means not enforced.
	TokensPerMinute int64 `koanf:"tokens_per_minute"`
	// OutputTokensPerMinute is the pool's output-token budget, as the
	// account's is for the account; 0 means not enforced.
	OutputTokensPerMinute int64 `koanf:"output_tokens_per_minute"`
	// MaxInFlight bounds the pool's requests in flight upstream, as the
	// account's does the account's.
	MaxInFlight int64 `koanf:"max_in_flight"`
	// MaxRequestTokens is the most one request may be charged in the
	// pool's tokens, as the account's is for the account: 0 means the
	// pool's own TokensPerMinute (the account's is not inherited).
	MaxRequestTokens int64 `koanf:"max_request_tokens"`
	// AdaptiveInFlight makes the pool's in-flight bound adaptive, as the
	// account's does the account's (not inherited).
	AdaptiveInFlight bool `koanf:"adaptive_in_flight"`
	// MinInFlight is the floor of the pool's adaptive bound, as the
	// account's is the account's (not inherited).
	MinInFlight int64 `koanf:"min_in_flight"`
}

// DefaultPool is the account's pool as metrics and /admin/state name it:
// every model no account.models entry matches.
const DefaultPool = "default"

// poolName is what a pool's name must look like: it goes into Redis keys
// and metric labels.
var poolName = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// maxPattern bounds a match pattern's length, and maxModelName the model
// names matched against them: a longer one (from a hostile path or body)
// draws on the account without being matched, so matching costs at most
// maxPattern × maxModelName steps per pattern.
const (
	maxPattern   = 256
	maxModelName = 512
)

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

// Model is what a request names its pool by: the model field of its
// body, or the Azure deployment its path names.
type Model struct {
	// Name is the model or the deployment; "" when there is none.
	Name string
	// Deployment says Name is an Azure deployment. Azure compares
	// deployment names case-insensitively, so matching does too (ASCII
	// letters: a deployment name has no others, usage.ValidDeployment); a
	// model field is matched exactly, as providers' model ids are
	// case-sensitive.
	Deployment bool
}

// PoolFor names the pool a request for m draws on: the first
// account.models entry one of whose patterns matches it, else accountPool
// (the account's). An empty model (none found) is the account's.
func (c Config) PoolFor(m Model) string {
	match, ok := m.matcher()
	if !ok {
		return accountPool
	}
	for _, pool := range c.Account.Models {
		if slices.ContainsFunc(pool.Match, match) {
			return pool.Name
		}
	}
	return accountPool
}

// matcher returns how a pattern is matched against m — exactly, or for a
// deployment case-insensitively — and false when no pattern is: m has no
// name, or one longer than any pattern is worth matching against.
func (m Model) matcher() (func(pattern string) bool, bool) {
	if m.Name == "" || len(m.Name) > maxModelName {
		return nil, false
	}
	match := globMatch
	if m.Deployment {
		match = globMatchFold
	}
	return func(p string) bool { return match(p, m.Name) }, true
}

// validateModels checks account.models: names, patterns (none empty,
// none that an earlier one already covers, so each can match), and each
// pool's numbers as the account's are checked.
func (c Config) validateModels(bad func(string, string, ...any)) {
	seen := map[string]int{}
	var patterns firstMatch
	for i, m := range c.Account.Models {
		key := fmt.Sprintf("%s.models[%d]", c.acctKey(), i)
		switch {
		case !poolName.MatchString(m.Name):
			bad(key+".name", "must be 1 to 64 of a-z, 0-9, _, . and -, got %q", m.Name)
		case m.Name == DefaultPool:
			bad(key+".name", "%q names the account's own pool; choose another", m.Name)
		default:
			if j, dup := seen[m.Name]; dup {
				bad(key+".name", "%q is already the name of account.models[%d]", m.Name, j)
			}
			seen[m.Name] = i
		}
		patterns.check(bad, key+".match", m.Match)
		checkAllowance(bad, key, AccountConfig{RequestsPerMinute: m.RequestsPerMinute, AdaptiveInFlight: m.AdaptiveInFlight}.requestsPerMinute(), m.TokensPerMinute, m.OutputTokensPerMinute, m.MaxInFlight, c.Account.ExpectedReplicas)
		checkMaxCharge(bad, key, m.MaxRequestTokens, m.TokensPerMinute)
		checkMinInFlight(bad, key, m.MinInFlight, m.MaxInFlight)
	}
}

// firstMatch is the patterns of a first-match-wins list (account.models,
// prices) checked so far, each with its key. The zero value is an empty
// list.
type firstMatch []struct{ key, pattern string }

// check checks the match list under key (account.models[0].match): not
// empty, each pattern valid (checkPattern) and not covered by one before
// it in the list, which would leave it nothing to match; and adds them.
func (f *firstMatch) check(bad func(string, string, ...any), key string, match []string) {
	if len(match) == 0 {
		bad(key, "must list at least one model name or pattern")
	}
	for j, p := range match {
		pkey := fmt.Sprintf("%s[%d]", key, j)
		if err := checkPattern(p); err != "" {
			bad(pkey, "%s, got %q", err, p)
			continue
		}
		for _, e := range *f {
			if globCovers(e.pattern, p) {
				bad(pkey, "%q can never match: %s (%q) matches every model it does, and the first match wins", p, e.key, e.pattern)
				break
			}
		}
		*f = append(*f, struct{ key, pattern string }{pkey, p})
	}
}

// checkPattern says what is wrong with a match pattern, or "".
func checkPattern(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case len(p) > maxPattern:
		return fmt.Sprintf("must be at most %d bytes", maxPattern)
	case !utf8.ValidString(p):
		return "must be UTF-8"
	case strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return "must not hold spaces or control characters"
	}
	return ""
}

// globMatch reports whether s matches pattern p, in which * stands for any
// run of characters (none included) and every other byte for itself. It
// backtracks only to the last star, so it is linear in len(p)·len(s) at
// worst.
func globMatch(p, s string) bool {
	return globMatchFn(p, s, func(pc, sc byte, _ bool) bool { return pc == sc })
}

// globMatchFold is globMatch with ASCII letters compared
// case-insensitively, for Azure deployments.
func globMatchFold(p, s string) bool {
	return globMatchFn(p, s, func(pc, sc byte, _ bool) bool { return lowerASCII(pc) == lowerASCII(sc) })
}

// lowerASCII is c in lower case when it is an ASCII letter, else c.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// globCovers reports whether every string q matches also matches p: p
// matches q's text when q's stars are symbols only p's stars may stand
// for.
func globCovers(p, q string) bool {
	return globMatchFn(p, q, func(pc, sc byte, _ bool) bool { return pc == sc && sc != '*' })
}

// globMatchFn is the matcher both use: a * in p takes any run of s;
// another byte of p must equal the byte of s (eq).
func globMatchFn(p, s string, eq func(pc, sc byte, star bool) bool) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && eq(p[pi], s[si], false):
			pi++
			si++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
