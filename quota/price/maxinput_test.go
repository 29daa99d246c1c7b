package price

import "testing"

// TestDefaultMaxInput: each family's context window, the fallback for
// the rest and for a long context, matched by prefix regardless of case.
func TestDefaultMaxInput(t *testing.T) {
	for _, tt := range []struct {
		model string
		long  bool
		want  int64
	}{
		{"gpt-4.1", false, 1_047_576},
		{"gpt-4.1-nano-2025-04-14", false, 1_047_576},
		{"gpt-5-mini", false, 400_000},
		{"gpt-5.1", false, 400_000},
		{"gpt-4o-2024-08-06", false, 128_000},
		{"GPT-4o-Mini", false, 128_000}, // an Azure deployment named after it
		{"chatgpt-4o-latest", false, 128_000},
		{"o1", false, 200_000},
		{"o3-pro", false, 200_000},
		{"o4-mini", false, 200_000},
		{"claude-sonnet-4-5", false, 200_000},
		{"claude-sonnet-4-5", true, FallbackMaxInput},
		{"gpt-4-turbo", false, FallbackMaxInput},
		{"my-deployment", false, FallbackMaxInput},
		{"", false, FallbackMaxInput},
	} {
		if got := DefaultMaxInput(tt.model, tt.long); got != tt.want {
			t.Errorf("DefaultMaxInput(%q, %v) = %d, want %d", tt.model, tt.long, got, tt.want)
		}
	}
}
