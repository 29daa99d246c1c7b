package fakeprovider_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/tidwall/gjson"
)

// TestReasoningTokens: a reply of an OpenAI reasoning model reports half
// its output tokens as reasoning, within the output, in the provider's
// shape — chat and Responses, JSON and the stream's usage — and names the
// model asked for; any other model reports 0.
func TestReasoningTokens(t *testing.T) {
	tests := []struct {
		name, path, body string
		usage, reasoning string // gjson paths in the body, or in the stream's event carrying the usage
		wantReasoning    bool
	}{
		{"chat o3-mini", "/v1/chat/completions", `{"model":"o3-mini","messages":[{"role":"user","content":"hi"}]}`,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", true},
		{"chat gpt-5 streamed", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", true},
		{"chat gpt-4o", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", false},
		{"responses o4-mini", "/v1/responses", `{"model":"o4-mini","input":"hello"}`,
			"usage.output_tokens", "usage.output_tokens_details.reasoning_tokens", true},
		{"responses gpt-5 streamed", "/v1/responses", `{"model":"gpt-5","input":"hello","stream":true}`,
			"response.usage.output_tokens", "response.usage.output_tokens_details.reasoning_tokens", true},
		{"responses omni is not o-series", "/v1/responses", `{"model":"omni-moderation-latest","input":"hello"}`,
			"usage.output_tokens", "usage.output_tokens_details.reasoning_tokens", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, _, b := post(t, srv, tc.path, tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			doc := string(b)
			if strings.Contains(tc.body, `"stream":true`) {
				doc = ""
				for _, e := range parseSSE(t, b) {
					if gjson.Get(e.data, tc.usage).Exists() {
						doc = e.data
					}
				}
			}
			out, reasoning := gjson.Get(doc, tc.usage), gjson.Get(doc, tc.reasoning)
			want := int64(0)
			if tc.wantReasoning {
				want = out.Int() / 2
			}
			if !out.Exists() || out.Int() == 0 || !reasoning.Exists() || reasoning.Int() != want {
				t.Errorf("output %s reasoning %s, want reasoning %d: %s", out.Raw, reasoning.Raw, want, doc)
			}
			model := gjson.Get(doc, "model").Str + gjson.Get(doc, "response.model").Str
			if wantModel := gjson.Get(tc.body, "model").Str; model != wantModel {
				t.Errorf("model %q, want %q", model, wantModel)
			}
		})
	}
}
