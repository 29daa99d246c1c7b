package fakeprovider_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestRoutes: Azure's v1 API, its deployment API and its Responses path
// answer as the OpenAI paths they serve; images and speech answer
// without usage (DALL·E's JSON, the audio itself); the token counts and
// the model list answer what they count.
func TestRoutes(t *testing.T) {
	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		method, path, body string
		contentType        string
		contains           string
		usage              bool // the answer reports usage
	}{
		{"POST", "/openai/v1/chat/completions", chat, "application/json", `"object":"chat.completion"`, true},
		{"POST", "/openai/v1/responses", `{"model":"gpt-4o","input":"hi"}`, "application/json", `"object":"response"`, true},
		{"POST", "/openai/responses", `{"model":"gpt-4o","input":"hi"}`, "application/json", `"object":"response"`, true},
		{"POST", "/openai/v1/embeddings", `{"model":"e","input":"hi"}`, "application/json", `"prompt_tokens"`, true},
		{"POST", "/openai/deployments/e/embeddings", `{"input":"hi"}`, "application/json", `"prompt_tokens"`, true},
		{"POST", "/openai/v1/completions", `{"model":"i","prompt":"hi"}`, "application/json", `"object":"text_completion"`, true},
		{"POST", "/v1/images/generations", `{"model":"dall-e-3","prompt":"a cat"}`, "application/json", `"b64_json"`, false},
		{"POST", "/openai/deployments/dall-e-3/images/generations", `{"prompt":"a cat"}`, "application/json", `"b64_json"`, false},
		{"POST", "/v1/audio/speech", `{"model":"tts-1","input":"hi","voice":"alloy"}`, "audio/mpeg", "ID3", false},
		{"POST", "/v1/messages/count_tokens", `{"model":"claude","messages":[]}`, "application/json", `{"input_tokens":8}`, false},
		{"POST", "/v1/responses/input_tokens", `{"model":"gpt-4o","input":"hi"}`, "application/json", `"input_tokens":8`, false},
		{"GET", "/v1/models", ``, "application/json", `"id":"fake-model"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, header, b := send(t, srv, tc.method, tc.path, tc.body, nil)
			if status != http.StatusOK || header.Get("Content-Type") != tc.contentType || !strings.Contains(string(b), tc.contains) {
				t.Errorf("%d %s %s, want 200 %s with %s", status, header.Get("Content-Type"), b, tc.contentType, tc.contains)
			}
			if strings.Contains(string(b), `"usage"`) != tc.usage {
				t.Errorf("%s: usage %v, want %v", b, !tc.usage, tc.usage)
			}
		})
	}
}
