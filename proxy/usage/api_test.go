package usage

import "testing"

func TestAPIForPath(t *testing.T) {
	tests := []struct {
		path string
		want API
	}{
		{"/v1/chat/completions", ChatCompletions},
		{"/openai/deployments/gpt-4o/chat/completions", ChatCompletions},
		{"/openai/deployments/my.deploy-1/chat/completions", ChatCompletions},
		{"/v1/responses", Responses},
		{"/v1/messages", Messages},
		{"/v1/embeddings", Embeddings},
		{"/openai/deployments/ada/embeddings", Embeddings},
		{"/v1/messages/batches", Other},
		{"/v1/messages/batches/msgbatch_01", Other},
		{"/v1/messages/count_tokens", Other},
		{"/v1/responses/resp_123", Other},
		{"/v1/completions", Other},
		{"/v1/batches", Other},
		{"/v1/models", Other},
		{"/v1/chat/completions/", Other},
		{"/openai/deployments//chat/completions", Other},
		{"/openai/deployments/a/b/chat/completions", Other},
		{"/openai/deployments/gpt-4o/completions", Other},
		{"/openai/deployments/gpt-4o", Other},
		{"/openai/deployments/GPT-4o/chat/completions", ChatCompletions},
		{"/openai/deployments/gpt-4o./chat/completions", Other},
		{"/openai/deployments/gpt-4o;v=1/chat/completions", Other},
		{"/openai/deployments/gpt 4o/embeddings", Other},
		{"/chat/completions", Other},
		{"", Other},
		{"/", Other},
	}
	for _, tt := range tests {
		if got := APIForPath(tt.path); got != tt.want {
			t.Errorf("APIForPath(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestValidDeployment: the deployment names the proxy and Azure read
// alike.
func TestValidDeployment(t *testing.T) {
	for name, want := range map[string]bool{
		"gpt-4o": true, "GPT-4o_mini.v2": true, "a": true, "1": true,
		"": false, "gpt-4o.": false, ".": false, "gpt;v=1": false, "gpt%2E": false, "gpt 4o": false,
		"gpt~4o": false, "gpt/4o": false, `gpt\4o`: false, "gpté": false,
	} {
		if got := ValidDeployment(name); got != want {
			t.Errorf("ValidDeployment(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestAPIString(t *testing.T) {
	for api, want := range map[API]string{
		ChatCompletions: "chat_completions", Responses: "responses", Messages: "messages",
		Embeddings: "embeddings", Other: "other", API(200): "other",
	} {
		if got := api.String(); got != want {
			t.Errorf("API(%d).String() = %q, want %q", api, got, want)
		}
	}
}
