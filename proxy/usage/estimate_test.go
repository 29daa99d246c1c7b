package usage

import "testing"

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
