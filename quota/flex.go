package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota/glob"
	"github.com/meterproxy/meterproxy/quota/price"
)

// flexConfig is a class's use of the flex service tier (OpenAI's flex
// processing, Azure OpenAI's on Global Standard deployments): batch
// prices, slower answers, and now and then a 429 for lack of capacity.
// It is read from the class's keys classes.<class>.service_tier,
// flex_models and flex_fallback (interactiveConfig, BulkConfig); the zero
// value sends nothing at flex.
type flexConfig struct {
	// ServiceTier is "flex" to send the class's requests for FlexModels at
	// the flex tier, or "" (unset) to leave them at the caller's.
	ServiceTier string
	// FlexModels lists the models sent at flex, with account.models'
	// globs (* any run of characters); a model none matches is left alone,
	// as flex is offered for some models only.
	FlexModels []string
	// FlexFallback resends a request at the default tier when flex had no
	// capacity for it within the class's max_wait; false (the default)
	// answers the provider's 429 instead.
	FlexFallback bool
}

// Flex is how a request is sent at the flex tier (Config.FlexFor).
type Flex struct {
	// Fallback is the class's flex_fallback.
	Fallback bool
	// Tier is the tier admission reserves its budgets at: price.TierFlex, or ""
	// (the default tier, the dearer) when the request may fall back to it,
	// so a fallback never costs more than was reserved.
	Tier string
}

// flexTiers are the values classes.<class>.service_tier may take: "" is
// unset.
var flexTiers = []string{price.TierFlex}

// flex is class cl's flex configuration.
func (c ClassesConfig) flex(cl classify.Class) flexConfig {
	if cl == classify.Bulk {
		return flexConfig{ServiceTier: c.Bulk.ServiceTier, FlexModels: c.Bulk.FlexModels, FlexFallback: c.Bulk.FlexFallback}
	}
	i := c.Interactive
	return flexConfig{ServiceTier: i.ServiceTier, FlexModels: i.FlexModels, FlexFallback: i.FlexFallback}
}

// check checks a class's flex keys under key (classes.bulk): service_tier
// flex or unset, flex_models valid patterns none of which an earlier one
// covers, and listed only with service_tier: flex (or they would do
// nothing unseen).
func (f flexConfig) check(bad func(string, string, ...any), key string) {
	if err := configcheck.OneOf(f.ServiceTier, flexTiers...); f.ServiceTier != "" && err != nil {
		bad(key+".service_tier", "%v (or unset: the caller's tier)", err)
	}
	if f.ServiceTier != price.TierFlex {
		if len(f.FlexModels) > 0 || f.FlexFallback {
			bad(key+".service_tier", "must be %q when %s or %s is set", price.TierFlex, configcheck.Ref(key+".flex_models"), configcheck.Ref(key+".flex_fallback"))
		}
		return
	}
	var patterns glob.FirstMatch
	patterns.Check(bad, key+".flex_models", f.FlexModels)
}
