package gate

import "github.com/meterproxy/meterproxy/internal/configcheck"

// BudgetsConfig is the budgets section: what holds for every spend budget
// (each budget itself is callers[].budget or classes.<class>.budget).
type BudgetsConfig struct {
	// OnStoreError is what a budgeted request gets while the shared store
	// (Redis) fails: closed (the default) refuses it, 503
	// store_unavailable; local lets each replica spend at most its share
	// of what each budget had left when it last read it (÷
	// account.expected_replicas), refusing beyond it as budget_exceeded,
	// and adds what it spent to the store's spend when the store returns
	// (see "Spend and budgets"). With the in-process store it changes
	// nothing.
	OnStoreError OnStoreError `koanf:"on_store_error"`
}

// DefaultBudgets is the budgets section's defaults: fail closed, since
// no replica alone knows what the fleet has spent.
func DefaultBudgets() BudgetsConfig { return BudgetsConfig{OnStoreError: StoreErrorClosed} }

// OnStoreError is a budgets.on_store_error policy.
type OnStoreError string

// The budgets.on_store_error policies.
const (
	// StoreErrorClosed refuses a budgeted request while the store fails.
	StoreErrorClosed OnStoreError = "closed"
	// StoreErrorLocal admits a budgeted request within this replica's
	// share of what was left (LocalBudgets).
	StoreErrorLocal OnStoreError = "local"
)

// StoreErrorPolicies are the budgets.on_store_error values.
var StoreErrorPolicies = []OnStoreError{StoreErrorClosed, StoreErrorLocal}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another policy is refused at load, by key.
func (p *OnStoreError) UnmarshalText(b []byte) error {
	return configcheck.SetOneOf(p, b, StoreErrorPolicies...)
}

// Check adds every problem of c to bad, under key (the section's).
func (c BudgetsConfig) Check(bad func(key, format string, args ...any), key string) {
	if err := configcheck.OneOf(c.OnStoreError, StoreErrorPolicies...); err != nil {
		bad(key+".on_store_error", "%v", err)
	}
}
