package proxy

import (
	"fmt"
	"net/url"
	"strings"
)

// Accounts of several providers behind one deployment: each of
// upstream.accounts is of its own provider (its provider key, else
// upstream.provider, else told by its url's host), and a request goes
// only to the accounts that can serve its path's family — Anthropic's
// /v1/messages to Anthropic accounts, Azure's /openai/… to Azure
// accounts, OpenAI's paths to OpenAI or OpenAI-compatible accounts.
// Borrowing and moves stay among those (quota.Request.Accounts). When
// every account is of one provider (and with the one account of
// upstream.url) nothing is told apart: every path goes to every account,
// as a gateway in front of one provider is used. The caller gates —
// callers, classes, caps and budgets — are the deployment's, across all
// of its accounts.

// servedBy is which accounts serve one path family.
type servedBy struct {
	// among are their names, nil for every account (one provider).
	among []string
	// provider is theirs: the family's requests fall under its dialect.
	provider upstreamProvider
	// ok is false when no account serves the family: its requests are
	// refused (noAccount), never sent to another provider.
	ok bool
}

// familyTable is servedBy for every family, and the deployment's accounts
// as a refusal names them ("chat (openai), east (azure)").
type familyTable struct {
	served [len(families)]servedBy
	listed string
}

// accountProvider is the provider of account a, which upstream.provider
// names unless a names its own.
func accountProvider(a Account, upstream Provider) Provider {
	if a.Provider != "" {
		return a.Provider
	}
	return upstream
}

// AccountProviders are the providers of c's accounts, in order, as
// check-config prints them: the provider's name, with "(told by the
// host)" where neither the account nor upstream.provider names it; ""
// for an account whose url does not parse. c is valid.
func AccountProviders(c UpstreamConfig) []string {
	out := make([]string, len(c.Accounts))
	for i, a := range c.Accounts {
		u, err := url.Parse(a.URL)
		if err != nil {
			continue
		}
		p := newUpstreamProvider(accountProvider(a, c.Provider), u)
		out[i] = p.host.String()
		if !p.named {
			out[i] += " (told by the host)"
		}
	}
	return out
}

// serves reports whether an account of provider p serves family f: the
// family's own provider's accounts do, and OpenAI's paths go to OpenAI's
// and any OpenAI-compatible server's.
func (p upstreamProvider) serves(f family) bool {
	if ff := families[f]; !ff.byHost {
		return p.host == ff.dialect
	}
	return p.host == dialectOpenAI || p.host == dialectCompatible
}

// newFamilyTable is cfg's family table; cfg is valid (Config.Validate).
func newFamilyTable(cfg UpstreamConfig) (familyTable, error) {
	var t familyTable
	if len(cfg.Accounts) == 0 {
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return t, err
		}
		t.everyFamily(newUpstreamProvider(cfg.Provider, u))
		return t, nil
	}
	ps := make([]upstreamProvider, len(cfg.Accounts))
	names := make([]string, len(cfg.Accounts))
	one := true
	for i, a := range cfg.Accounts {
		u, err := url.Parse(a.URL)
		if err != nil {
			return t, fmt.Errorf("upstream.accounts[%d].url: %w", i, err)
		}
		ps[i] = newUpstreamProvider(accountProvider(a, cfg.Provider), u)
		names[i] = a.Name + " (" + ps[i].host.String() + ")"
		one = one && ps[i].host == ps[0].host
	}
	t.listed = strings.Join(names, ", ")
	if one {
		t.everyFamily(ps[0])
		return t, nil
	}
	for f := range t.served {
		s := &t.served[f]
		s.among = []string{} // not nil: none is none, not every account
		for i, a := range cfg.Accounts {
			if ps[i].serves(family(f)) {
				s.among = append(s.among, a.Name)
				s.provider, s.ok = ps[i], true
			}
		}
	}
	return t, nil
}

// everyFamily sends every family to every account, of provider p.
func (t *familyTable) everyFamily(p upstreamProvider) {
	for f := range t.served {
		t.served[f] = servedBy{provider: p, ok: true}
	}
}

// familyNames name the families in refusals and errors.
var familyNames = [len(families)]string{
	familyOpenAI:       "OpenAI's API",
	familyAzure:        "Azure OpenAI's API",
	familyAnthropic:    "Anthropic's API",
	familyGeminiOpenAI: "Gemini's OpenAI-compatible API",
	familyGemini:       "Gemini's API",
}

// validateFamilies checks that the accounts serving each family are of
// one provider: a request's dialect (how it is charged, how the headers
// of its answer are read) is settled before admission says where it
// goes, and a path cannot say whether it is for OpenAI or for an
// OpenAI-compatible server. providers are the accounts', in order (nil
// where an account's url is invalid, reported already).
func validateFamilies(bad func(string, string, ...any), providers []*upstreamProvider) {
	var first *upstreamProvider
	mixed := false
	for _, p := range providers {
		if p == nil {
			continue
		}
		if first == nil {
			first = p
		}
		mixed = mixed || p.host != first.host
	}
	if !mixed {
		return
	}
	for f := range families {
		at := -1
		for i, p := range providers {
			switch {
			case p == nil || !p.serves(family(f)):
			case at < 0:
				at = i
			case p.host != providers[at].host:
				bad(fmt.Sprintf("upstream.accounts[%d]", i), "is %s and upstream.accounts[%d] is %s: both would serve %s, and a request's path cannot say which of them it is for; "+
					"name one provider for both (provider: %s on each), or serve them from separate deployments",
					p.host, at, providers[at].host, familyNames[f], dialectCompatible)
			}
		}
	}
}
