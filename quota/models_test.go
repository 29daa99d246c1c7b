package quota

import (
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/quota/store"
)

func TestPoolFor(t *testing.T) {
	c := DefaultConfig()
	c.Account.Models = []modelPool{
		{Name: "gpt-4o", Match: []string{"gpt-4o", "gpt-4o-2024-*"}},
		{Name: "mini-group", Match: []string{"gpt-4o-mini*", "gpt-4.1-nano*"}},
		{Name: "claude", Match: []string{"claude-*-4*"}},
		{Name: "any-llama", Match: []string{"*llama*"}},
	}
	tests := []struct{ model, want string }{
		{"gpt-4o", "gpt-4o"},
		{"gpt-4o-2024-08-06", "gpt-4o"},
		{"gpt-4o-mini", "mini-group"},
		{"gpt-4o-mini-2024-07-18", "mini-group"},
		{"gpt-4.1-nano", "mini-group"},
		{"gpt-4o-audio-preview", store.AccountPool}, // "gpt-4o" matches only itself
		{"claude-sonnet-4-5", "claude"},
		{"claude-3-haiku", store.AccountPool},
		{"Meta-Llama-3.1-8B", store.AccountPool}, // case matters
		{"meta/llama-3", "any-llama"},
		{"", store.AccountPool},
		{"GPT-4O", store.AccountPool},
	}
	for _, tt := range tests {
		if got := c.PoolFor(Model{Name: tt.model}); got != tt.want {
			t.Errorf("PoolFor(%q) = %q, want %q", tt.model, got, tt.want)
		}
	}
}

// TestPoolForDeployment: an Azure deployment matches its pool's patterns
// case-insensitively, as Azure compares deployment names; a model field
// with the same letters does not (TestPoolFor).
func TestPoolForDeployment(t *testing.T) {
	c := DefaultConfig()
	c.Account.Models = []modelPool{
		{Name: "mini", Match: []string{"gpt-4o-mini*"}},
		{Name: "prod", Match: []string{"Prod-GPT4o"}},
	}
	tests := []struct{ deployment, want string }{
		{"gpt-4o-mini", "mini"},
		{"GPT-4o-Mini", "mini"},
		{"GPT-4O-MINI-eu", "mini"},
		{"prod-gpt4o", "prod"},
		{"PROD-GPT4O", "prod"},
		{"Prod-GPT4o", "prod"},
		{"prod-gpt4o-2", store.AccountPool},
		{"gpt-4o", store.AccountPool},
	}
	for _, tt := range tests {
		if got := c.PoolFor(Model{Name: tt.deployment, Deployment: true}); got != tt.want {
			t.Errorf("PoolFor(deployment %q) = %q, want %q", tt.deployment, got, tt.want)
		}
	}
	if got := c.PoolFor(Model{Name: "PROD-GPT4O"}); got != store.AccountPool {
		t.Errorf("PoolFor(model PROD-GPT4O) = %q, want the account: model fields match exactly", got)
	}
}

func TestModelsValidate(t *testing.T) {
	tests := []struct {
		name   string
		models []modelPool
		want   []string // each must appear in the error; none: valid
	}{
		{"valid", []modelPool{
			{Name: "gpt-4o", Match: []string{"gpt-4o", "gpt-4o-2*"}, RequestsPerMinute: 5000, MaxInFlight: 100},
			{Name: "mini", Match: []string{"gpt-4o-mini*"}, RequestsPerMinute: 30000, MaxInFlight: 150},
		}, nil},
		{"empty match", []modelPool{{Name: "a", RequestsPerMinute: 1, MaxInFlight: 1}},
			[]string{"account.models[0].match: must list at least one model name or pattern"}},
		{"duplicate names", []modelPool{
			{Name: "a", Match: []string{"x"}, RequestsPerMinute: 1, MaxInFlight: 1},
			{Name: "a", Match: []string{"y"}, RequestsPerMinute: 1, MaxInFlight: 1},
		}, []string{`account.models[1].name: "a" is already the name of account.models[0]`}},
		{"bad names", []modelPool{
			{Name: "GPT 4", Match: []string{"x"}, RequestsPerMinute: 1, MaxInFlight: 1},
			{Name: "default", Match: []string{"y"}, RequestsPerMinute: 1, MaxInFlight: 1},
			{Name: "", Match: []string{"z"}, RequestsPerMinute: 1, MaxInFlight: 1},
		}, []string{`account.models[0].name: must be 1 to 64 of a-z, 0-9, _, . and -, got "GPT 4"`,
			`account.models[1].name: "default" names the account's own pool`, `account.models[2].name: must be 1 to 64`}},
		{"invalid patterns", []modelPool{{Name: "a", Match: []string{"", "gpt 4", strings.Repeat("x", 300)}, RequestsPerMinute: 1, MaxInFlight: 1}},
			[]string{`account.models[0].match[0]: must not be empty`, `account.models[0].match[1]: must not hold spaces`,
				`account.models[0].match[2]: must be at most 256 bytes`}},
		{"covered by an earlier pattern", []modelPool{
			{Name: "all-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 1, MaxInFlight: 1},
			{Name: "mini", Match: []string{"gpt-4o-mini*"}, RequestsPerMinute: 1, MaxInFlight: 1},
		}, []string{`account.models[1].match[0]: "gpt-4o-mini*" can never match: account.models[0].match[0] ("gpt-4o*") matches every model it does`}},
		{"covered within a pool", []modelPool{{Name: "a", Match: []string{"*", "x"}, RequestsPerMinute: 1, MaxInFlight: 1}},
			[]string{`account.models[0].match[1]: "x" can never match`}},
		{"numbers", []modelPool{{Name: "a", Match: []string{"x"}, RequestsPerMinute: 0, TokensPerMinute: -1, OutputTokensPerMinute: -1, MaxInFlight: 0}},
			[]string{"account.models[0].requests_per_minute: must be > 0", "account.models[0].tokens_per_minute: must be >= 0",
				"account.models[0].output_tokens_per_minute: must be between 0", "account.models[0].max_in_flight: must be > 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Account.Models = tt.models
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused a valid config: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
