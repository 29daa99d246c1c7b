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
