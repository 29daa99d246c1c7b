package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestRunPlanAccounts: with upstream.accounts, plan plans each account on
// its own limits (its pools with it) and adds their bounds up: one fleet
// and one transport serve them all.
func TestRunPlanAccounts(t *testing.T) {
	// chat-project 10000/min at 0.8 s: 133 in flight (200 configured);
	// its pool mini 6000/min: 80, held to its 50; batch-project 5000/min:
	// 66 (100 configured). Over 4 replicas: 34 + 13 + 17 = 64 per process.
	yaml := strings.Replace(accountsYAML(""), "account: {requests_per_minute: 10000, max_in_flight: 200}",
		"account: {requests_per_minute: 10000, max_in_flight: 200, models: [{name: mini, match: [gpt-4o-mini*], requests_per_minute: 6000, max_in_flight: 50}]}", 1)
	path := writeConfig(t, yaml)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"plan", "--config", path, "--latency", "800ms", "--replicas", "4"}, accountsEnv, &out, &errOut); err != nil {
		t.Fatalf("plan: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		`account chat-project \(upstream\.accounts\[0\]; its numbers below are its own`,
		`account requests/s\s+166\.67\s+account\.requests_per_minute 10000 / 60\n(.*\n)fleet in flight\s+133\s`,
		`pool chat-project/mini \(`,
		`account requests/s\s+100\.00\s+account\.requests_per_minute 6000 / 60\n(.*\n)fleet in flight\s+50\s`,
		`account batch-project \(upstream\.accounts\[1\]`,
		`account requests/s\s+83\.33\s+account\.requests_per_minute 5000 / 60\n(.*\n)fleet in flight\s+66\s`,
		`all accounts \(one fleet, one transport\)\nfleet in flight\s+249\s`,
		`per-process in flight\s+64\s+every account's`,
		`transport connections\s+70\s`,
		`max replicas\s+4\s+the HPA's maxReplicas: ceil\(249 / 64\)`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("table lacks %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := run(t.Context(), []string{"plan", "--config", path, "--latency", "800ms", "--json"}, accountsEnv, &out, &errOut); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, errOut.String())
	}
	var got struct {
		Accounts []struct {
			Name          string `json:"name"`
			FleetInFlight int64  `json:"fleet_in_flight"`
			Replicas      int64  `json:"replicas"`
			Pools         map[string]struct {
				FleetInFlight int64 `json:"fleet_in_flight"`
			} `json:"pools"`
		} `json:"accounts"`
		Total planTotal `json:"total"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out.String())
	}
	// Without --replicas each account is planned for its expected_replicas
	// (1, the default): a replica holds the whole fleet bound.
	want := planTotal{FleetInFlight: 249, PerProcessInFlight: 249, TransportConnections: 273, MaxReplicas: 1}
	if len(got.Accounts) != 2 || got.Accounts[0].Name != "chat-project" || got.Accounts[0].FleetInFlight != 133 ||
		got.Accounts[0].Pools["mini"].FleetInFlight != 50 || got.Accounts[1].Name != "batch-project" ||
		got.Accounts[1].FleetInFlight != 66 || got.Accounts[1].Replicas != 1 || got.Total != want {
		t.Errorf("JSON %s: want chat-project's 133 (mini's 50) and batch-project's 66, total %+v", out.String(), want)
	}
}

// TestRunPlanAccountsReplicas: an account's own expected_replicas is what
// it is planned for when --replicas is not given; the top level's when it
// sets none.
func TestRunPlanAccountsReplicas(t *testing.T) {
	yaml := strings.Replace(accountsYAML("account: {expected_replicas: 4}\n"), "account: {requests_per_minute: 5000, max_in_flight: 100}",
		"account: {requests_per_minute: 5000, max_in_flight: 100, expected_replicas: 2}", 1)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"plan", "--config", writeConfig(t, yaml), "--latency", "800ms"}, accountsEnv, &out, &errOut); err != nil {
		t.Fatalf("plan: %v\n%s", err, errOut.String())
	}
	// chat-project: ceil(133 / 4) = 34; batch-project: ceil(66 / 2) = 33.
	for _, want := range []string{`per-process in flight\s+34\s+the worker's concurrency: ceil\(133 / 4 replicas\)`,
		`per-process in flight\s+33\s+the worker's concurrency: ceil\(66 / 2 replicas\)`, `per-process in flight\s+67\s+every account's`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("table lacks %s:\n%s", want, out.String())
		}
	}
}
