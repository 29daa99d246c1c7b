package quota

import (
	"fmt"
	"regexp"

	"github.com/meterproxy/meterproxy/quota/glob"
	"github.com/meterproxy/meterproxy/quota/price"
)

// modelPool is one entry of account.models: the models it matches draw on
// a pool of their own — its own windows, in-flight bound, class partition,
// upstream state and Redis keys — instead of the account's, as providers
// keep limits per model (OpenAI), per model class (Anthropic) or per
// deployment (Azure). The YAML keys are the koanf tags.
type modelPool struct {
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

// matcher returns how a pattern is matched against m — exactly, or for a
// deployment case-insensitively — and false when no pattern is: m has no
// name, or one longer than any pattern is worth matching against.
func (m Model) matcher() (func(pattern string) bool, bool) {
	return glob.Matcher(m.Name, m.Deployment)
}

// priceIn is m's entry in t (price.Table.For), nil when none matches.
func (m Model) priceIn(t price.Table) *price.Price { return t.For(m.Name, m.Deployment) }

// validateModels checks account.models: names, patterns (none empty,
// none that an earlier one already covers, so each can match), and each
// pool's numbers as the account's are checked.
func validateModels(c Config, bad func(string, string, ...any)) {
	seen := map[string]int{}
	var patterns glob.FirstMatch
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
		patterns.Check(bad, key+".match", m.Match)
		checkAllowance(bad, key, AccountConfig{RequestsPerMinute: m.RequestsPerMinute, AdaptiveInFlight: m.AdaptiveInFlight}.requestsPerMinute(), m.TokensPerMinute, m.OutputTokensPerMinute, m.MaxInFlight, c.Account.ExpectedReplicas)
		checkMaxCharge(bad, key, m.MaxRequestTokens, m.TokensPerMinute)
		checkMinInFlight(bad, key, m.MinInFlight, m.MaxInFlight)
	}
}
