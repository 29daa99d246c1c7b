package fakeprovider_test

import (
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// sdkClient is the official OpenAI Go SDK pointed at srv, without retries.
func sdkClient(srv *httptest.Server) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(srv.Client()),
		option.WithMaxRetries(0),
	)
}

// TestOpenAISDK checks the official SDK reads the fake's replies,
// streams included.
func TestOpenAISDK(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	client := sdkClient(srv)
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hi")},
	}
	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Message.Content != reply2 || c.Usage.CompletionTokens != 9 || c.Usage.PromptTokens == 0 {
			t.Errorf("completion = %s", c.RawJSON())
		}
	})
	t.Run("chat stream", func(t *testing.T) {
		p := params
		p.StreamOptions.IncludeUsage = openai.Bool(true)
		stream := client.Chat.Completions.NewStreaming(t.Context(), p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != reply2 || acc.Usage.CompletionTokens != 9 {
			t.Errorf("accumulated %q, usage %+v", acc.Choices[0].Message.Content, acc.Usage)
		}
	})
	t.Run("responses stream", func(t *testing.T) {
		stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
			Model: "gpt-test",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var done responses.Response
		for stream.Next() {
			if ev := stream.Current(); ev.Type == "response.completed" {
				done = ev.AsResponseCompleted().Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if done.OutputText() != reply1 || done.Usage.OutputTokens != 9 || done.Usage.TotalTokens <= 9 {
			t.Errorf("response = %s", done.RawJSON())
		}
	})
}

// TestOpenAISDKEmbeddings checks the official SDK reads embeddings.
func TestOpenAISDKEmbeddings(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	client := sdkClient(srv)
	e, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "text-embedding-test",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Data) != 2 || len(e.Data[1].Embedding) != 8 || e.Usage.PromptTokens == 0 {
		t.Errorf("embeddings = %s", e.RawJSON())
	}
}
