package usage

import "testing"

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
		Embeddings: "embeddings", Completions: "completions", Other: "other", API(200): "other",
		GenerateContent: "generate_content", EmbedContent: "embed_content",
	} {
		if got := api.String(); got != want {
			t.Errorf("API(%d).String() = %q, want %q", api, got, want)
		}
	}
}
