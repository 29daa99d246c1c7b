package quota

import (
	"fmt"
	"slices"

	"github.com/meterproxy/meterproxy/classify"
)

// Several provider accounts (upstream.accounts): the design's static
// partition by project, made whole. Each account is what the one account
// is without the key: its own windows, in-flight bound, pools per model,
// provider headers and holds, under Redis keys of its own (accountTag).
// A class goes to the accounts that serve it, in their order, and when
// those have nothing left it may borrow from the accounts that lend to
// it: a lender's own limiter admits a borrower as bulk is admitted beyond
// its share — never into its interactive reserve, and held while the
// lender's own headers say it is below that reserve — so a borrower slows
// the lender's own classes no more than bulk slows interactive on one
// account today. The caller gates (caps, budgets) stay one for all the
// accounts: they belong to the caller, not to an account.

// Account is admission's part of one provider account of
// upstream.accounts: its name, limits and classes. Where its requests go
// and the key they carry there are the proxy's (proxy.Account).
type Account struct {
	// Name names the account in metrics, /admin/state and its Redis keys.
	Name string `koanf:"name"`
	// Account is the account's own limits, as the top-level account
	// section describes one. Its expected_replicas, left 0, is the top
	// level's: the fleet is the same whichever account it sends to.
	Account AccountConfig `koanf:"account"`
	// Serves are the classes sent here first.
	Serves []classify.Class `koanf:"serves"`
	// LendsTo are the classes that may use what the account has above its
	// interactive reserve when the accounts that serve them have nothing
	// left.
	LendsTo []classify.Class `koanf:"lends_to"`
}

// accountNames are the accounts cfg configures: their names, in order, or
// the one unnamed account ("") without upstream.accounts.
func accountNames(c Config) []string {
	if len(c.Accounts) == 0 {
		return []string{""}
	}
	names := make([]string, len(c.Accounts))
	for i, a := range c.Accounts {
		names[i] = a.Name
	}
	return names
}

// classesFor is classes as account a partitions it. An account that
// serves both classes partitions itself as the classes section says. One
// that serves interactive alone gives bulk no share of its own, and lets
// it borrow what is above the interactive reserve if it lends to bulk.
// One that serves bulk alone has no interactive to reserve for: bulk may
// take all of it. One that serves neither (an account only lent, to spill
// to) lends all of it.
func (a Account) classesFor(classes ClassesConfig) ClassesConfig {
	servesI, servesB := slices.Contains(a.Serves, classify.Interactive), slices.Contains(a.Serves, classify.Bulk)
	switch {
	case servesI && servesB:
	case servesI:
		classes.Bulk.Share, classes.Bulk.Borrow = 0, slices.Contains(a.LendsTo, classify.Bulk)
	default:
		classes.Interactive.Reserve, classes.Bulk.Share, classes.Bulk.Borrow = 0, 1, true
	}
	return classes
}

// candidates are the accounts a request of class c may go to, in order of
// preference: those that serve it, in their order, then those that lend
// to it. Without upstream.accounts it is the one account.
func candidates(c Config, class classify.Class) []string {
	if len(c.Accounts) == 0 {
		return []string{""}
	}
	var out []string
	for _, a := range c.Accounts {
		if slices.Contains(a.Serves, class) {
			out = append(out, a.Name)
		}
	}
	for _, a := range c.Accounts {
		if slices.Contains(a.LendsTo, class) {
			out = append(out, a.Name)
		}
	}
	return out
}

// validateAccounts checks admission's part of upstream.accounts: names,
// the classes each serves and lends to, and each account's numbers as the
// top-level account's are checked. The proxy checks its part (url and
// api_key_env, proxy.Account) and the start what the accounts forbid
// beside them; no key is checked twice.
func validateAccounts(c Config, bad func(string, string, ...any)) {
	if len(c.Accounts) == 0 {
		return
	}
	seen := map[string]int{}
	reached := map[classify.Class]bool{}
	for i, a := range c.Accounts {
		key := fmt.Sprintf("upstream.accounts[%d]", i)
		switch {
		case !poolName.MatchString(a.Name):
			bad(key+".name", "must be 1 to 64 of a-z, 0-9, _, . and -, got %q", a.Name)
		case a.Name == DefaultPool || a.Name == "none":
			bad(key+".name", "%q is what metrics call the one account (default) or no account yet (none); choose another", a.Name)
		default:
			if j, dup := seen[a.Name]; dup {
				bad(key+".name", "%q is already the name of upstream.accounts[%d]", a.Name, j)
			}
			seen[a.Name] = i
		}
		for _, cl := range a.Serves {
			reached[cl] = true
			if slices.Contains(a.LendsTo, cl) {
				bad(key+".lends_to", "%s is in serves already: an account serves a class or lends to it, not both", cl)
			}
		}
		for _, cl := range a.LendsTo {
			reached[cl] = true
		}
		if dupClass(a.Serves) || dupClass(a.LendsTo) {
			bad(key, "names a class twice in serves or lends_to")
		}
		if len(a.Serves)+len(a.LendsTo) == 0 {
			bad(key+".serves", "must name at least one class (interactive, bulk), or lends_to must: the account would never be used")
		}
		if slices.Contains(a.Serves, classify.Bulk) && !slices.Contains(a.Serves, classify.Interactive) && slices.Contains(a.LendsTo, classify.Interactive) {
			bad(key+".lends_to", "an account that serves bulk alone cannot lend to interactive: interactive is admitted ahead of bulk, so the borrower would slow the account's own class; serve both classes, or lend from an account that serves interactive")
		}
		acct := c.ForAccount(a.Name)
		ak := key + ".account"
		if a.Account.ExpectedReplicas < 0 {
			bad(ak+".expected_replicas", "must be >= 1, or 0 for account.expected_replicas, got %d", a.Account.ExpectedReplicas)
		}
		checkAllowance(bad, ak, acct.Account.requestsPerMinute(), acct.Account.TokensPerMinute, acct.Account.OutputTokensPerMinute,
			acct.Account.MaxInFlight, acct.Account.ExpectedReplicas)
		checkMaxCharge(bad, ak, acct.Account.MaxRequestTokens, acct.Account.TokensPerMinute)
		checkMinInFlight(bad, ak, acct.Account.MinInFlight, acct.Account.MaxInFlight)
		if len(a.Account.Models) > 0 { // else the shared account.models, checked once
			validateModels(acct, bad)
		}
	}
	for _, cl := range classify.Classes {
		if !reached[cl] {
			bad("upstream.accounts", "no account serves or lends to %s: its requests would have nowhere to go", cl)
		}
	}
}

// dupClass reports whether classes names a class twice.
func dupClass(classes []classify.Class) bool {
	var seen [classify.NumClasses]bool
	for _, c := range classes {
		if c.Valid() && seen[c] {
			return true
		}
		if c.Valid() {
			seen[c] = true
		}
	}
	return false
}
