package classify

import (
	"net/http"
	"strings"
	"testing"
)

func TestCredential(t *testing.T) {
	tests := []struct {
		name       string
		h          http.Header
		wantHeader string
		wantKey    string
		wantOK     bool
	}{
		{"none", header(), "", "", false},
		{"nil header", nil, "", "", false},
		{"bearer", header("Authorization", "Bearer k1"), "Authorization", "k1", true},
		{"bearer lower case", header("Authorization", "bearer k1"), "Authorization", "k1", true},
		{"bearer upper case", header("Authorization", "BEARER k1"), "Authorization", "k1", true},
		{"bearer trimmed", header("Authorization", " \tBearer   k1 \t"), "Authorization", "k1", true},
		{"bearer tab", header("Authorization", "Bearer\tk1"), "Authorization", "k1", true},
		{"bearer without token", header("Authorization", "Bearer "), "", "", false},
		{"bearer glued to token", header("Authorization", "Bearerk1"), "", "", false},
		{"basic is skipped", header("Authorization", "Basic dXNlcjpwYXNz"), "", "", false},
		{"basic falls through to api-key", header("Authorization", "Basic x", "Api-Key", "k2"), "Api-Key", "k2", true},
		{"api-key", header("api-key", "k2"), "Api-Key", "k2", true},
		{"api-key trimmed", header("api-key", "  k2 "), "Api-Key", "k2", true},
		{"x-api-key", header("x-api-key", "k3"), "X-Api-Key", "k3", true},
		{"authorization wins over api-key", header("Authorization", "Bearer k1", "Api-Key", "k2", "X-Api-Key", "k3"), "Authorization", "k1", true},
		{"api-key wins over x-api-key", header("Api-Key", "k2", "X-Api-Key", "k3"), "Api-Key", "k2", true},
		{"empty api-key falls through", header("Api-Key", "  ", "X-Api-Key", "k3"), "X-Api-Key", "k3", true},
		{"empty authorization falls through", header("Authorization", "", "X-Api-Key", "k3"), "X-Api-Key", "k3", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotHeader, gotKey, gotOK := Credential(tt.h)
			if gotHeader != tt.wantHeader || gotKey != tt.wantKey || gotOK != tt.wantOK {
				t.Errorf("Credential() = (%q, %q, %v), want (%q, %q, %v)",
					gotHeader, gotKey, gotOK, tt.wantHeader, tt.wantKey, tt.wantOK)
			}
		})
	}
}

func FuzzCredential(f *testing.F) {
	f.Add("Bearer sk-1", "", "")
	f.Add("bEaReR \t sk-1 ", "sk-2", "sk-3")
	f.Add("Basic abc", " ", "sk-3")
	f.Add("Bearer", "", "")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, auth, apiKey, xAPIKey string) {
		h := http.Header{
			"Authorization": {auth},
			"Api-Key":       {apiKey},
			"X-Api-Key":     {xAPIKey},
		}
		name, key, ok := Credential(h)
		if !ok {
			if name != "" || key != "" {
				t.Fatalf("ok=false but returned (%q, %q)", name, key)
			}
			if trim(apiKey) != "" || trim(xAPIKey) != "" {
				t.Fatalf("missed a key in Api-Key %q / X-Api-Key %q", apiKey, xAPIKey)
			}
			return
		}
		if key == "" || key != trim(key) {
			t.Fatalf("key %q is empty or untrimmed", key)
		}
		value := h.Get(name)
		if value == "" {
			t.Fatalf("header %q is not one of the credential headers", name)
		}
		if !strings.Contains(value, key) {
			t.Fatalf("key %q is not in header %s value %q", key, name, value)
		}
		if name == "Authorization" && !strings.EqualFold(trim(value)[:6], "bearer") {
			t.Fatalf("took a key from a non-Bearer Authorization %q", value)
		}
	})
}

func TestConflictingCredentials(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{"none", http.Header{}, false},
		{"one", http.Header{"Authorization": {"Bearer k"}}, false},
		{"same key twice", http.Header{"Authorization": {"Bearer k"}, "X-Api-Key": {"k"}}, false},
		{"decoy bearer", http.Header{"Authorization": {"Bearer decoy"}, "X-Api-Key": {"k"}}, true},
		{"basic beside a key", http.Header{"Authorization": {"Basic Zm9v"}, "Api-Key": {"k"}}, true},
		{"two lines of one header", http.Header{"X-Api-Key": {"a", "b"}}, true},
		{"an empty one", http.Header{"Authorization": {"Bearer k"}, "Api-Key": {" "}}, false},
		{"bearer case and spaces", http.Header{"Authorization": {"bearer  k "}, "X-Api-Key": {"k"}}, false},
	}
	for _, tt := range tests {
		if got := ConflictingCredentials(tt.h); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
