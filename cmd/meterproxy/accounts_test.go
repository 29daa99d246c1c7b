package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meterproxy/meterproxy/classify"
)

// accountsYAML is a configuration of two accounts, with the callers they
// require; extra is appended at the top level.
func accountsYAML(extra string) string {
	return `
classify: {unknown_callers: reject}
callers:
  - {name: chat, key_env: CHAT_KEY, class: interactive}
upstream:
  accounts:
    - name: chat-project
      url: https://api.openai.com
      api_key_env: OPENAI_KEY_CHAT
      account: {requests_per_minute: 10000, max_in_flight: 200}
      serves: [interactive]
      lends_to: [bulk]
    - name: batch-project
      url: https://api.openai.com
      api_key_env: OPENAI_KEY_BATCH
      account: {requests_per_minute: 5000, max_in_flight: 100}
      serves: [bulk]
` + extra
}

var accountsEnv = []string{"CHAT_KEY=sk-caller-chat-aaaaaaaaaaaaaaaa", "OPENAI_KEY_CHAT=sk-chat-project", "OPENAI_KEY_BATCH=sk-batch-project"}

// TestAccountsConfig: upstream.accounts loads as the issue writes it, and
// hands quota each account and the proxy each key.
func TestAccountsConfig(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, accountsYAML("")), accountsEnv, lookupIn(accountsEnv))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.quota()
	if len(q.Accounts) != 2 || q.Accounts[1].Name != "batch-project" || q.Accounts[1].Account.MaxInFlight != 100 ||
		q.Accounts[0].LendsTo[0] != classify.Bulk {
		t.Fatalf("quota's accounts: %+v", q.Accounts)
	}
	keys := cfg.accountKeys(lookupIn(accountsEnv))
	if keys["chat-project"] != "sk-chat-project" || keys["batch-project"] != "sk-batch-project" {
		t.Fatalf("account keys: %d of them, not the environment's", len(keys))
	}
}

// TestAccountsConfigRefusals: with several accounts the proxy holds every
// key: pass-through callers, a key beside them, a variable with no key,
// and the single account's limits beside them are refused, by key. Each
// key of an account is checked by its one owner — name, limits and
// classes by quota, url and api_key_env by the proxy, what must not be
// set beside them and the key's variable by the start — so each problem
// is reported once.
func TestAccountsConfigRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml    string
		environ []string
		want    string
	}{
		"forward":     {strings.Replace(accountsYAML(""), "unknown_callers: reject", "unknown_callers: forward", 1), accountsEnv, "classify.unknown_callers: is forward"},
		"api_key":     {accountsYAML(""), append([]string{"METERPROXY_UPSTREAM_API_KEY=sk-x"}, accountsEnv...), "upstream.api_key"},
		"url":         {accountsYAML(""), append([]string{"METERPROXY_UPSTREAM_URL=https://example.com"}, accountsEnv...), "upstream.url"},
		"account":     {accountsYAML("account: {requests_per_minute: 5}\n"), accountsEnv, "account: is set beside upstream.accounts"},
		"missing key": {accountsYAML(""), accountsEnv[:2], "upstream.accounts[1].api_key_env: OPENAI_KEY_BATCH is unset"},
		"no key env":  {strings.Replace(accountsYAML(""), "api_key_env: OPENAI_KEY_BATCH", "", 1), accountsEnv, "upstream.accounts[1].api_key_env: must name"},
		"bad url":     {strings.Replace(accountsYAML(""), "url: https://api.openai.com\n      api_key_env: OPENAI_KEY_BATCH", "url: ftp://x\n      api_key_env: OPENAI_KEY_BATCH", 1), accountsEnv, "upstream.accounts[1].url"},
		"openai beside compatible": {strings.Replace(accountsYAML(""), "url: https://api.openai.com\n      api_key_env: OPENAI_KEY_BATCH", "url: http://vllm.internal:8000\n      api_key_env: OPENAI_KEY_BATCH", 1),
			accountsEnv, "upstream.accounts[1]: is openai-compatible and upstream.accounts[0] is openai: both would serve OpenAI's API"},
		"bad provider": {strings.Replace(accountsYAML(""), "api_key_env: OPENAI_KEY_BATCH", "api_key_env: OPENAI_KEY_BATCH\n      provider: gemeni", 1),
			accountsEnv, "upstream.accounts[1].provider"},
		"limits":      {strings.Replace(accountsYAML(""), "max_in_flight: 100", "max_in_flight: 0", 1), accountsEnv, "upstream.accounts[1].account.max_in_flight"},
		"unknown key": {strings.Replace(accountsYAML(""), "serves: [bulk]", "serves: [bulk]\n      weight: 2", 1), accountsEnv, "weight"},
		"bad class":   {strings.Replace(accountsYAML(""), "serves: [bulk]", "serves: [batch]", 1), accountsEnv, "upstream.accounts[1].serves"},
		"bad name":    {strings.Replace(accountsYAML(""), "name: batch-project", "name: Batch Project", 1), accountsEnv, "upstream.accounts[1].name"},
		"served and lent": {strings.Replace(accountsYAML(""), "serves: [bulk]", "serves: [bulk]\n      lends_to: [bulk]", 1), accountsEnv,
			"upstream.accounts[1].lends_to"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, tc.yaml), tc.environ, lookupIn(tc.environ))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadConfig = %v, want a problem naming %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), tc.want); n != 1 {
				t.Errorf("%q reported %d times, want once (one owner checks it): %v", tc.want, n, err)
			}
			for _, secret := range []string{"sk-chat-project", "sk-batch-project"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the refusal shows a key: %v", err)
				}
			}
		})
	}
}

// TestReloadAccountsLive: while there are several accounts, a reload adds,
// changes and removes them live; going back to one account needs a
// restart, as changing upstream.url does.
func TestReloadAccountsLive(t *testing.T) {
	env := append([]string{"OPENAI_KEY_SPILL=sk-spill-project"}, accountsEnv...)
	r := newTestReloader(t, accountsYAML(""), env)
	pools := func() map[string]bool {
		out := map[string]bool{}
		for name := range r.admitter.State().Pools {
			out[name] = true
		}
		return out
	}
	if p := pools(); !p["chat-project/default"] || !p["batch-project/default"] {
		t.Fatalf("pools at start: %v", p)
	}
	added := strings.Replace(accountsYAML(""), "max_in_flight: 100}", "max_in_flight: 50}", 1) + `    - name: spill-project
      url: https://api.openai.com
      api_key_env: OPENAI_KEY_SPILL
      account: {requests_per_minute: 600, max_in_flight: 10}
      lends_to: [interactive, bulk]
`
	r.reloadTo(t, added) // accountsYAML("") ends with the list: the account joins it
	if got := testutil.ToFloat64(r.results.WithLabelValues(reloadSuccess)); got != 1 {
		t.Fatalf("adding an account: %v successful reloads; logs:\n%s", got, r.logs)
	}
	if p := pools(); !p["spill-project/default"] {
		t.Fatalf("the added account has no pool: %v", p)
	}
	if got := r.admitter.State().Pools["batch-project/default"].InFlightLimit; got != 50 {
		t.Errorf("batch-project's bound after the reload: %d, want 50", got)
	}
	r.reloadTo(t, accountsYAML(""))
	if got := testutil.ToFloat64(r.results.WithLabelValues(reloadSuccess)); got != 2 {
		t.Fatalf("removing an account: %v successful reloads; logs:\n%s", got, r.logs)
	}
	if p := pools(); p["spill-project/default"] {
		t.Fatalf("the removed account's pool is still there: %v", p)
	}
	r.reloadTo(t, "classify: {unknown_callers: reject}\ncallers:\n  - {name: chat, key_env: CHAT_KEY, class: interactive}\n")
	if got := testutil.ToFloat64(r.results.WithLabelValues(reloadNeedsRestart)); got != 1 {
		t.Fatalf("going back to one account: %v needs_restart; logs:\n%s", got, r.logs)
	}
}

// severalProvidersYAML is a deployment of an OpenAI project, an Azure
// OpenAI resource and an Anthropic workspace, with one pool list every
// account shares (account.models) but Anthropic, which lists its own.
const severalProvidersYAML = `
classify: {unknown_callers: reject}
callers:
  - {name: chat, key_env: CHAT_KEY, class: interactive}
account:
  models:
    - {name: mini, match: ["gpt-4o-mini*"], requests_per_minute: 600, max_in_flight: 10}
upstream:
  accounts:
    - name: openai
      url: https://api.openai.com
      api_key_env: OPENAI_KEY
      account: {requests_per_minute: 10000, max_in_flight: 200}
      serves: [interactive, bulk]
    - name: azure-east
      url: https://east.openai.azure.com
      api_key_env: AZURE_KEY
      account: {requests_per_minute: 5000, max_in_flight: 100}
      serves: [interactive, bulk]
    - name: anthropic
      url: https://api.anthropic.com
      api_key_env: ANTHROPIC_KEY
      account:
        requests_per_minute: 4000
        max_in_flight: 100
        models:
          - {name: haiku, match: ["claude-haiku-*"], requests_per_minute: 1000, max_in_flight: 20}
      serves: [interactive, bulk]
`

var severalProvidersEnv = []string{"CHAT_KEY=sk-caller-chat-aaaaaaaaaaaaaaaa", "OPENAI_KEY=sk-openai", "AZURE_KEY=azure-key", "ANTHROPIC_KEY=sk-ant-key"}

// TestAccountsOfSeveralProvidersConfig: accounts of three providers load
// (each told by its host), and the shared pool list reaches the accounts
// that list none of their own, under the account's name.
func TestAccountsOfSeveralProvidersConfig(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, severalProvidersYAML), severalProvidersEnv, lookupIn(severalProvidersEnv))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.quota()
	for account, want := range map[string]string{"openai": "mini", "azure-east": "mini", "anthropic": "haiku"} {
		models := q.ForAccount(account).Account.Models
		if len(models) != 1 || models[0].Name != want {
			t.Errorf("%s's pools: %+v, want %s alone", account, models, want)
		}
	}
}
