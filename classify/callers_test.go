package classify

import (
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

func TestValidateCallers(t *testing.T) {
	chatHash := hashOf(chatKey)
	tests := []struct {
		name    string
		callers []Caller
		env     map[string]string
		want    []string // substrings, each expected in the error; nil means valid
	}{
		{"none", nil, nil, nil},
		{"valid", testCallers(), map[string]string{"IMPORT_KEY": importKey}, nil},
		{"upper-case hash", []Caller{{Name: "a", KeySHA256: strings.ToUpper(chatHash)}}, nil, nil},
		{"empty name", []Caller{{KeySHA256: chatHash}}, nil,
			[]string{`callers[0].name: must not be empty`}},
		{"reserved name", []Caller{{Name: "unknown", KeySHA256: chatHash}}, nil,
			[]string{`callers[0].name: "unknown" is reserved`}},
		{"duplicate name", []Caller{
			{Name: "a", KeySHA256: chatHash},
			{Name: "b", KeySHA256: hashOf(adminKey)},
			{Name: "a", KeySHA256: hashOf(importKey)},
		}, nil, []string{`callers[2].name: duplicate of callers[0].name "a"`}},
		{"neither key", []Caller{{Name: "a"}}, nil,
			[]string{`callers[0]: set exactly one of key_sha256 and key_env`}},
		{"both keys", []Caller{{Name: "a", KeySHA256: chatHash, KeyEnv: "K"}}, map[string]string{"K": chatKey},
			[]string{`callers[0]: set exactly one of key_sha256 and key_env`}},
		{"short hash", []Caller{{Name: "a"}, {Name: "b", KeySHA256: chatHash[:63]}}, nil,
			[]string{`callers[0]: set exactly one`, `callers[1].key_sha256: must be 64 hex characters`}},
		{"raw key instead of hash", []Caller{{Name: "a", KeySHA256: chatKey}}, nil,
			[]string{`callers[0].key_sha256: must be 64 hex characters`}},
		{"non-hex hash", []Caller{{Name: "a", KeySHA256: "g" + chatHash[1:]}}, nil,
			[]string{`callers[0].key_sha256: must be 64 hex characters`}},
		{"hash of empty key", []Caller{{Name: "a", KeySHA256: hashOf("")}}, nil,
			[]string{`callers[0].key_sha256: is the hash of an empty key`}},
		{"unset env", []Caller{{Name: "a", KeyEnv: "IMPORT_KEY"}}, nil,
			[]string{`callers[0].key_env: environment variable IMPORT_KEY is empty or unset`}},
		{"blank env", []Caller{{Name: "a", KeyEnv: "IMPORT_KEY"}}, map[string]string{"IMPORT_KEY": " \n"},
			[]string{`callers[0].key_env: environment variable IMPORT_KEY is empty or unset`}},
		{"duplicate hash, different case", []Caller{
			{Name: "a", KeySHA256: chatHash},
			{Name: "b", KeySHA256: strings.ToUpper(chatHash)},
		}, nil, []string{`callers[1].key_sha256: same key as callers[0]`}},
		{"duplicate key across hash and env", []Caller{
			{Name: "a", KeySHA256: chatHash},
			{Name: "b", KeyEnv: "CHAT"},
		}, map[string]string{"CHAT": chatKey}, []string{`callers[1].key_env: same key as callers[0]`}},
		{"bad class", []Caller{{Name: "a", KeySHA256: chatHash, Class: 5}}, nil,
			[]string{`callers[0].class: must be "interactive" or "bulk", got class(5)`}},
		{"caps", []Caller{{Name: "a", KeySHA256: chatHash, MaxInFlight: 3, RequestsPerMinute: 120}}, nil, nil},
		{"negative caps", []Caller{{Name: "a", KeySHA256: chatHash, MaxInFlight: -1, RequestsPerMinute: -5}}, nil,
			[]string{"callers[0].max_in_flight: must be >= 0", "callers[0].requests_per_minute: must be >= 0"}},
		{"every problem at once", []Caller{
			{Name: "", KeySHA256: chatKey},
			{Name: "x", KeyEnv: "MISSING"},
			{Name: "x", KeySHA256: hashOf(adminKey), KeyEnv: "ADMIN"},
		}, map[string]string{"ADMIN": adminKey}, []string{
			"callers[0].name:", "callers[0].key_sha256:", "callers[1].key_env:",
			"callers[2].name:", "callers[2]: set exactly one",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := configcheck.Under("callers", ValidateCallers(tt.callers, env(tt.env)))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("ValidateCallers() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateCallers() = nil, want errors containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ValidateCallers() = %q, want it to contain %q", err, w)
				}
			}
			if got := strings.Count(err.Error(), "\n") + 1; got != len(tt.want) {
				t.Errorf("ValidateCallers() reported %d problems, want %d:\n%v", got, len(tt.want), err)
			}
			assertNoSecrets(t, err.Error())
		})
	}
}

func TestValidateCallersNilGetenv(t *testing.T) {
	err := configcheck.Under("callers", ValidateCallers([]Caller{{Name: "a", KeyEnv: "K"}}, nil))
	if err == nil || !strings.Contains(err.Error(), "callers[0].key_env: environment variable K is empty or unset") {
		t.Fatalf("ValidateCallers(nil getenv) = %v", err)
	}
}

func TestNewReportsConfigAndCallerProblemsTogether(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UnknownCallers = "drop"
	c, err := New(cfg, []Caller{{Name: "a", KeySHA256: chatKey}}, nil)
	if c != nil || err == nil {
		t.Fatalf("New() = %v, %v; want nil and an error", c, err)
	}
	for _, w := range []string{"classify.unknown_callers:", "callers[0].key_sha256:"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("New() error %q does not contain %q", err, w)
		}
	}
	assertNoSecrets(t, err.Error())
}
