package usage

import (
	"strings"
	"testing"
)

func TestEstimateInput(t *testing.T) {
	for _, tt := range []struct {
		body string
		want int64
	}{
		{"", 0}, {"a", 1}, {"abcd", 1}, {"abcde", 2}, {`{"model":"gpt-4o","max_tokens":100}`, 9},
	} {
		if got := EstimateInput([]byte(tt.body)); got != tt.want {
			t.Errorf("EstimateInput(%q) = %d, want %d", tt.body, got, tt.want)
		}
	}
}

func TestMaxOutput(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       int64
	}{
		{"absent", `{"model":"gpt-4o"}`, 0},
		{"max_tokens", `{"model":"claude","max_tokens":1024}`, 1024},
		{"max_output_tokens", `{"model":"gpt-4.1","max_output_tokens":500}`, 500},
		{"max_completion_tokens", `{"max_completion_tokens":300,"stream":true}`, 300},
		{"largest of several", `{"max_tokens":100,"max_completion_tokens":300}`, 300},
		{"null", `{"max_tokens":null}`, 0},
		{"string", `{"max_tokens":"100"}`, 0},
		{"negative", `{"max_tokens":-1}`, 0},
		{"nested only", `{"generation":{"max_tokens":100}}`, 0},
		{"not an object", `[{"max_tokens":100}]`, 0},
		{"not JSON", `max_tokens=100`, 0},
		{"empty", ``, 0},
	} {
		if got := MaxOutput([]byte(tt.body)); got != tt.want {
			t.Errorf("%s: MaxOutput(%s) = %d, want %d", tt.name, tt.body, got, tt.want)
		}
	}
}

func TestModel(t *testing.T) {
	long := `{"model":"` + strings.Repeat("m", 513) + `"}`
	tests := []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, "gpt-4o"},
		{`{"messages":[{"role":"user","content":"hi","model":"x"}],"model":"claude-sonnet-4-5"}`, "claude-sonnet-4-5"},
		{`{"messages":[{"model":"nested"}]}`, ""},
		{`{"model":4}`, ""},
		{`{"model":null}`, ""},
		{`{"model":["gpt-4o"]}`, ""},
		{`["model","gpt-4o"]`, ""},
		{`not json`, ""},
		{``, ""},
		{`{"model":"gpt-4o"`, "gpt-4o"}, // truncated: the field is there; the upstream judges the rest
		{`{"model":"gpt\u002d4o"}`, "gpt-4o"},
		{long, ""},
	}
	for _, tt := range tests {
		if got := Model([]byte(tt.body)); got != tt.want {
			t.Errorf("Model(%.40q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}
