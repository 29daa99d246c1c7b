package fakeprovider_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// completionBody is a legacy completion or one chunk of its stream.
type completionBody struct {
	Object  string `json:"object"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// TestCompletions: legacy completions, OpenAI's and Azure's deployment
// path, answer the reply's text in choices[0].text with Chat Completions'
// usage; streamed, object text_completion on every chunk, the text across
// the chunks, the usage chunk (choices empty) only when
// stream_options.include_usage asks for it, then [DONE].
func TestCompletions(t *testing.T) {
	const prompt = `{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","max_tokens":4`
	for _, path := range []string{"/v1/completions", "/openai/deployments/instruct/completions"} {
		t.Run(path, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			body := prompt + `}`
			status, _, b := post(t, srv, path, body)
			got := decode[completionBody](t, b)
			want := chatUsage{promptTokens(body), 4, promptTokens(body) + 4}
			if status != http.StatusOK || got.Object != "text_completion" || len(got.Choices) != 1 || got.Choices[0].Text != "echo: 1 messages this" ||
				got.Usage == nil || *got.Usage != want || *got.Choices[0].FinishReason != "length" {
				t.Fatalf("%d %s, want the 4-word reply with usage %+v", status, b, want)
			}
		})
	}
	for _, tc := range []struct {
		name, options string
		usage         bool
	}{{"without usage", ``, false}, {"include_usage", `,"stream_options":{"include_usage":true}`, true}} {
		t.Run("stream "+tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			body := prompt + `,"stream":true` + tc.options + `}`
			status, header, b := post(t, srv, "/v1/completions", body)
			events := parseSSE(t, b)
			if status != http.StatusOK || header.Get("Content-Type") != "text/event-stream" || events[len(events)-1].data != "[DONE]" {
				t.Fatalf("%d %q: %s", status, header.Get("Content-Type"), b)
			}
			var text strings.Builder
			var usage *chatUsage
			for _, e := range events[:len(events)-1] {
				c := decode[completionBody](t, []byte(e.data))
				if c.Object != "text_completion" {
					t.Errorf("chunk %s: object %q", e.data, c.Object)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Text)
				}
				if c.Usage != nil {
					usage = c.Usage
				}
			}
			if text.String() != "echo: 1 messages this" || (usage != nil) != tc.usage {
				t.Errorf("text %q, usage %+v; want the 4-word reply, usage %v", text.String(), usage, tc.usage)
			}
		})
	}
}
