package main

import (
	"strings"
	"testing"
)

// TestConfigErrorsOnePerFault: a value the decoder refuses is reported
// once, not again as the default or zero it was left at.
func TestConfigErrorsOnePerFault(t *testing.T) {
	hashA, hashB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	accounts := "upstream:\n  accounts:\n    - {name: a, url: \"http://x\", api_key_env: K, serves: [interactive, bulk], " +
		"account: {requests_per_minute: 10, max_in_flight: 1}}\n"
	tests := []struct{ name, yaml, key string }{
		{"unknown_callers", "classify: {unknown_callers: rejct}\n" + accounts, "classify.unknown_callers"},
		{"usd", "callers:\n  - {name: app, key_sha256: \"" + hashA + "\", class: bulk, budget: {usd: \"3$\", per: day}}\n", "callers[0].budget.usd"},
		{"per", "callers:\n  - {name: app, key_sha256: \"" + hashB + "\", class: bulk, budget: {usd: 3, per: daily}}\n", "callers[0].budget.per"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := []string{"K=sk-account"}
			_, err := loadConfig(writeConfig(t, tt.yaml), env, lookupIn(env))
			if err == nil {
				t.Fatal("accepted")
			}
			var lines []string
			for line := range strings.Lines(err.Error()) {
				lines = append(lines, strings.TrimSpace(line))
			}
			n := 0
			for _, l := range lines {
				if strings.HasPrefix(l, tt.key+":") {
					n++
				}
			}
			if n != 1 || len(lines) != 1 {
				t.Errorf("%d errors for %s, %d in all; want one:\n%s", n, tt.key, len(lines), err)
			}
		})
	}
}

// TestConfigErrorNamesTheEnvironment: a problem with a value set by a
// METERPROXY_* variable names the variable.
func TestConfigErrorNamesTheEnvironment(t *testing.T) {
	path := writeConfig(t, "classify: {unknown_callers: reject}\nupstream:\n  accounts:\n"+
		"    - {name: a, url: \"http://x\", api_key_env: K, serves: [interactive, bulk], account: {requests_per_minute: 10, max_in_flight: 1}}\n")
	env := []string{"K=sk-account", "METERPROXY_UPSTREAM_API_KEY=sk-provider"}
	_, err := loadConfig(path, env, lookupIn(env))
	if err == nil || !strings.Contains(err.Error(), "upstream.api_key: is set beside upstream.accounts") ||
		!strings.Contains(err.Error(), "environment variable METERPROXY_UPSTREAM_API_KEY") {
		t.Fatalf("error %v, want upstream.api_key's naming METERPROXY_UPSTREAM_API_KEY", err)
	}
	if strings.Contains(err.Error(), "sk-provider") {
		t.Errorf("the key was printed: %v", err)
	}
}
