package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestCheckConfigAccounts: with upstream.accounts, check-config prints a
// section per account — its host, its key's variable by name (never the
// key), what it serves and lends, each class's part of it, its pools — and
// sizes the one transport for every account's bound together.
func TestCheckConfigAccounts(t *testing.T) {
	yaml := strings.Replace(accountsYAML(""), "url: https://api.openai.com\n      api_key_env: OPENAI_KEY_CHAT",
		"url: https://api.openai.com/\n      api_key_env: OPENAI_KEY_CHAT", 1) +
		"classes:\n  interactive: {reserve: 0.3}\n  bulk: {share: 0.2, borrow: true}\n"
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check-config", "--config", writeConfig(t, yaml)}, accountsEnv, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	got := out.String()
	// chat-project: 10000/min = 166.67/s and 200 in flight, 30% reserved;
	// batch-project 5000/min = 83.33/s and 100 in flight, all bulk's. The
	// transport: (200 + 100) + 30.
	for _, want := range []string{
		`account chat-project \(upstream\.accounts\[0\]\)`,
		`upstream host\s+api\.openai\.com\n`,
		`provider\s+openai \(told by the host\)\n`,
		`key\s+from \$OPENAI_KEY_CHAT \(set; the key is never printed\)`,
		`serves / lends to\s+interactive / bulk\n`,
		`interactive here\s+served \(account 1 of 1 for interactive: chat-project\); any free capacity, at most 166\.67 requests/s, 200 in flight; ` +
			`a reserve bulk never takes: 50\.00 requests/s, 60 in flight`,
		`bulk here\s+borrows \(account 2 of 2 for bulk: batch-project, chat-project\); no share of its own; ` +
			`borrowing at most 116\.67 requests/s, 140 in flight, never interactive's reserve`,
		`pool chat-project/default \(its own\)\s+fleet\s+per replica`,
		`bulk in flight \(own share / with borrowing\)\s+0 / 140`,
		`account batch-project \(upstream\.accounts\[1\]\)`,
		`key\s+from \$OPENAI_KEY_BATCH`,
		`serves / lends to\s+bulk / none\n`,
		`interactive here\s+not sent here\n`,
		`bulk here\s+served \(account 1 of 2 for bulk: batch-project, chat-project\); all of the account, 83\.33 requests/s, 100 in flight \(no interactive reserve here\)`,
		`pool batch-project/default \(its own\)`,
		`transport connection limit \(per host\)\s+-\s+330\n`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("check-config output lacks %s:\n%s", want, got)
		}
	}
	for _, secret := range []string{"sk-chat-project", "sk-batch-project", "sk-caller-chat"} {
		if strings.Contains(got, secret) {
			t.Errorf("check-config prints a key (%s…):\n%s", secret[:6], got)
		}
	}
	if strings.Contains(got, "pool default (the account)") {
		t.Errorf("check-config prints the top-level account beside upstream.accounts:\n%s", got)
	}
}

// TestCheckConfigAccountPools: an account's models are pools of its own,
// named account/pool as metrics name them, and the transport counts them.
func TestCheckConfigAccountPools(t *testing.T) {
	yaml := strings.Replace(accountsYAML(""), "account: {requests_per_minute: 5000, max_in_flight: 100}",
		"account: {requests_per_minute: 5000, max_in_flight: 100, models: [{name: mini, match: [gpt-4o-mini*], requests_per_minute: 1200, max_in_flight: 40}]}", 1)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check-config", "--config", writeConfig(t, yaml)}, accountsEnv, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{`pool batch-project/mini \(upstream\.accounts\[1\]\.account\.models\[0\]\)\s+fleet\s+per replica\nrequests/s\s+20\.00\s+20\.00`,
		`transport connection limit \(per host\)\s+-\s+374\n`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("check-config output lacks %s:\n%s", want, out.String())
		}
	}
}
