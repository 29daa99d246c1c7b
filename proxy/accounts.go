package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
	"github.com/meterproxy/meterproxy/quota"
)

// Account is one provider account of upstream.accounts: admission's part
// (quota.Account: its name, limits and the classes it serves and lends
// to), and where its requests go with which key, the proxy's.
type Account struct {
	quota.Account `koanf:",squash"`
	// URL is the account's base address, as upstream.url is the single
	// account's.
	URL string `koanf:"url"`
	// Provider is the account's provider, as upstream.provider names the
	// single account's (auto: told by URL's host); unset, it is
	// upstream.provider. Accounts of different providers serve the
	// paths of their own provider's API alone (served.go).
	Provider Provider `koanf:"provider"`
	// APIKeyEnv names the environment variable that holds the account's
	// key, injected into every request sent to it; unset or empty, the
	// start is refused.
	APIKeyEnv string `koanf:"api_key_env"`
}

// QuotaAccounts are admission's part of each of upstream.accounts, for
// quota.Config.Accounts.
func (c UpstreamConfig) QuotaAccounts() []quota.Account {
	if len(c.Accounts) == 0 {
		return nil
	}
	out := make([]quota.Account, len(c.Accounts))
	for i, a := range c.Accounts {
		out[i] = a.Account
	}
	return out
}

// upstreamAccount is where the requests admitted at one provider account
// go, and the key they carry there (quota/accounts.go).
type upstreamAccount struct {
	target *url.URL
	// key replaces the caller's credential; "" passes it through (the one
	// account without upstream.api_key).
	key string
}

// newUpstreamAccounts are the accounts cfg sends to, by name: the one
// account ("") at upstream.url with upstream.api_key, or each of
// upstream.accounts at its url with its key from keys (by account name,
// read from its api_key_env by the caller).
func newUpstreamAccounts(cfg UpstreamConfig, keys map[string]string) (map[string]upstreamAccount, error) {
	if len(cfg.Accounts) == 0 {
		target, err := url.Parse(cfg.URL)
		if err != nil {
			return nil, err
		}
		return map[string]upstreamAccount{"": {target: target, key: cfg.APIKey}}, nil
	}
	out := make(map[string]upstreamAccount, len(cfg.Accounts))
	for i, a := range cfg.Accounts {
		target, err := url.Parse(a.URL)
		if err != nil {
			return nil, fmt.Errorf("upstream.accounts[%d].url: %w", i, err)
		}
		key := keys[a.Name]
		if key == "" {
			return nil, fmt.Errorf("upstream.accounts[%d].api_key_env: %s holds no key", i, a.APIKeyEnv)
		}
		out[a.Name] = upstreamAccount{target: target, key: key}
	}
	return out, nil
}

// validateAccountEndpoints checks the proxy's part of upstream.accounts:
// each account's url, provider and api_key_env, and that the accounts
// serving each path family are of one provider (validateFamilies). The
// rest of each account is quota's to check (quota.Config.Validate);
// whether its key variable is set, the start's, which reads the
// environment.
func (c Config) validateAccountEndpoints(bad func(string, string, ...any)) {
	each := make([]*upstreamProvider, len(c.Upstream.Accounts))
	for i, a := range c.Upstream.Accounts {
		key := fmt.Sprintf("upstream.accounts[%d]", i)
		if a.Provider != "" {
			if err := configcheck.OneOf(a.Provider, providers...); err != nil {
				bad(key+".provider", "%v", err)
				continue
			}
		}
		p := accountProvider(a, c.Upstream.Provider)
		u, ok := checkUpstreamURL(bad, key+".url", a.URL, p)
		if a.APIKeyEnv == "" {
			bad(key+".api_key_env", "must name the environment variable that holds the account's key: with several accounts the proxy holds every key")
		}
		if ok {
			up := newUpstreamProvider(p, u)
			each[i] = &up
		}
	}
	validateFamilies(bad, each)
}

// accounts is the part of the handler that says where requests go: the
// provider account each is admitted at (of), each account's URL and key
// (get, reconfigure), the endpoint and spending of a new exchange
// (newExchange), and the forward path's moves to another account
// (spill.go). Safe for concurrent use.
type accounts struct {
	shared
	// byName are where requests go, by the account quota admitted them at,
	// and families which accounts serve each path family (reconfigure
	// replaces both, byName first).
	byName   atomic.Pointer[map[string]upstreamAccount]
	families atomic.Pointer[familyTable]
	// holdsKeys says the proxy injects a key of its own into every
	// request (upstream.api_key, or several accounts).
	holdsKeys bool
	// unreachable summarises account_unreachable (spill.go).
	unreachable unreachableLog
}

// newExchange is the exchange of a request on rt from res under live,
// answered through its recorder of w with stall (its write deadline's
// distance, recorder.stall), made with
// it: its endpoint resolved against the provider of the accounts that
// serve its family, and spending this account when the proxy holds its
// key or the caller is a configured one (destination.spent).
func (a *accounts) newExchange(live *Live, res classify.Result, rt route, w http.ResponseWriter, stall time.Duration) *exchange {
	s := a.families.Load().served[rt.family]
	ep := s.provider.resolve(rt)
	ep.among, ep.unserved = s.among, !s.ok
	both := &struct {
		ex  exchange
		rec recorder
	}{rec: recorder{ResponseWriter: w, stall: stall}}
	both.ex = exchange{res: res, endpoint: ep, live: live, dest: destination{spent: a.holdsKeys || res.Known}, rec: &both.rec}
	return &both.ex
}

// unserved is the refusal of ex's request when no account serves its
// path's family, or none of those serves or lends to its class
// (noAccount), else nil.
func (a *accounts) unserved(ex *exchange, method, path string) *refusal {
	var msg string
	switch {
	case ex.unserved:
		msg = fmt.Sprintf("meterproxy: no configured account serves %s (%s %s); the accounts are %s",
			familyNames[ex.rt.family], method, bounded(path, maxNamedPath), a.families.Load().listed)
	case ex.among != nil && a.admitter.HomeAccount(ex.res.Class, ex.among) == "":
		msg = fmt.Sprintf("meterproxy: no account that serves %s (%s) serves or lends to the %s class",
			familyNames[ex.rt.family], strings.Join(ex.among, ", "), ex.res.Class)
	default:
		return nil // a served request makes no refusal
	}
	f := noAccount(msg)
	return &f
}

// of is the account quota admitted ex's request at, or for one
// forwarded without a lease (shadow mode, batches and uploads) the first
// its class goes to.
func (a *accounts) of(ex *exchange) string {
	if ex.tally.lease != nil {
		return ex.tally.lease.Account()
	}
	return a.admitter.HomeAccount(ex.res.Class, ex.among)
}

// get is where requests admitted at the account named name go.
func (a *accounts) get(name string) upstreamAccount { return (*a.byName.Load())[name] }

// reconfigure applies a reloaded upstream.accounts, keeping the accounts
// it removes (Handler.ReconfigureAccounts).
func (a *accounts) reconfigure(cfg UpstreamConfig, keys map[string]string) error {
	next, err := newUpstreamAccounts(cfg, keys)
	if err != nil {
		return err
	}
	ft, err := newFamilyTable(cfg)
	if err != nil {
		return err
	}
	defer a.families.Store(&ft) // after byName: every account it names is known
	for name, acct := range *a.byName.Load() {
		if _, ok := next[name]; !ok {
			next[name] = acct
		}
	}
	a.byName.Store(&next)
	return nil
}
