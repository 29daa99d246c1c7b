package usage

import (
	"bytes"
	"testing"
)

func TestInjectStreamUsage(t *testing.T) {
	tests := []struct {
		name, body, want string
		injected         bool
	}{
		{"no stream", `{"model":"gpt-4o","messages":[]}`, `{"model":"gpt-4o","messages":[]}`, false},
		{"stream false", `{"model":"gpt-4o","stream":false}`, `{"model":"gpt-4o","stream":false}`, false},
		{"stream not a bool", `{"stream":"true"}`, `{"stream":"true"}`, false},
		{"stream without options",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"formatting kept",
			"{\n  \"stream\": true,\n  \"model\": \"gpt-4o\"\n}",
			"{\n  \"stream\": true,\n  \"model\": \"gpt-4o\"\n,\"stream_options\":{\"include_usage\":true}}", true},
		{"other options kept",
			`{"stream":true,"stream_options":{"include_obfuscation":false},"model":"gpt-4o"}`,
			`{"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"model":"gpt-4o"}`, true},
		{"vllm options kept",
			`{"stream":true,"stream_options":{"continuous_usage_stats":true}}`,
			`{"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`, true},
		{"include_usage false set true",
			`{"stream":true,"stream_options":{"include_usage":false,"include_obfuscation":true}}`,
			`{"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":true}}`, true},
		{"include_usage null set true",
			`{"stream":true,"stream_options":{"include_usage":null}}`,
			`{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"empty options", `{"stream":true,"stream_options":{}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"null options replaced", `{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"already true", `{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, false},
		{"invalid JSON", `{"stream":true,`, `{"stream":true,`, false},
		{"trailing garbage", `{"stream":true} x`, `{"stream":true} x`, false},
		{"not an object", `[{"stream":true}]`, `[{"stream":true}]`, false},
		{"empty", ``, ``, false},
		{"nested stream only", `{"metadata":{"stream":true}}`, `{"metadata":{"stream":true}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.body)
			out, injected := InjectStreamUsage(in)
			if string(out) != tt.want || injected != tt.injected {
				t.Errorf("got %s, %v\nwant %s, %v", out, injected, tt.want, tt.injected)
			}
			if !bytes.Equal(in, []byte(tt.body)) {
				t.Errorf("input modified: %s", in)
			}
		})
	}
}
