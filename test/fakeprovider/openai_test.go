package fakeprovider_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatBody struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

const twoMessages = `{"model":"gpt-test","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`

func TestChatCompletion(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantText   string
		wantFinish string
		wantModel  string
	}{
		{"two messages", twoMessages + `}`, reply2, "stop", "gpt-test"},
		{"max_tokens truncates", twoMessages + `,"max_tokens":4}`, "echo: 2 messages this", "length", "gpt-test"},
		{"max_completion_tokens wins", twoMessages + `,"max_tokens":4,"max_completion_tokens":2}`, "echo: 2", "length", "gpt-test"},
		{"wrong field types are ignored", `{"messages":5,"stream":"yes"}`, "echo: 0 messages this is a deterministic fake reply", "stop", "fake-model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, header, b := post(t, srv, "/v1/chat/completions", tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			if ct := header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			got := decode[chatBody](t, b)
			words := len(strings.Fields(tc.wantText))
			want := chatUsage{promptTokens(tc.body), words, promptTokens(tc.body) + words}
			switch {
			case got.Object != "chat.completion" || !strings.HasPrefix(got.ID, "chatcmpl-"):
				t.Errorf("object %q id %q", got.Object, got.ID)
			case got.Created != t0.Unix() || got.Model != tc.wantModel:
				t.Errorf("created %d model %q", got.Created, got.Model)
			case len(got.Choices) != 1 || got.Choices[0].Message.Content != tc.wantText:
				t.Errorf("choices = %+v, want text %q", got.Choices, tc.wantText)
			case *got.Choices[0].FinishReason != tc.wantFinish || got.Choices[0].Message.Role != "assistant":
				t.Errorf("finish %q role %q", *got.Choices[0].FinishReason, got.Choices[0].Message.Role)
			case got.Usage == nil || *got.Usage != want:
				t.Errorf("usage = %+v, want %+v", got.Usage, want)
			}
		})
	}
}

func TestChatStream(t *testing.T) {
	tests := []struct {
		name         string
		options      string
		chunks       int
		wantUsage    bool
		wantTailSize int // events after the content chunks
	}{
		{"no stream_options", ``, 0, false, 2},
		{"include_usage false", `,"stream_options":{"include_usage":false}`, 0, false, 2},
		{"include_usage true", `,"stream_options":{"include_usage":true}`, 0, true, 3},
		{"eight chunks", `,"stream_options":{"include_usage":true}`, 8, true, 3},
		{"more chunks than words", ``, 12, false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{StreamChunks: tc.chunks})
			body := twoMessages + `,"stream":true` + tc.options + `}`
			status, header, b := post(t, srv, "/v1/chat/completions", body)
			if status != http.StatusOK || header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, Content-Type %q", status, header.Get("Content-Type"))
			}
			events := parseSSE(t, b)
			chunks := max(tc.chunks, 0)
			if chunks == 0 {
				chunks = fakeprovider.DefaultStreamChunks
			}
			if want := 1 + chunks + tc.wantTailSize; len(events) != want {
				t.Fatalf("%d events, want %d: %q", len(events), want, b)
			}
			if last := events[len(events)-1]; last.data != "[DONE]" || last.event != "" {
				t.Errorf("last event = %+v, want data: [DONE]", last)
			}
			text, words := checkChatChunks(t, events[:len(events)-1], tc.wantUsage)
			// With more chunks than its 9 words, the reply is padded with filler.
			textOK := text == reply2 || (tc.chunks > 9 && strings.HasPrefix(text, reply2))
			if !textOK {
				t.Errorf("text = %q, want %q", text, reply2)
			}
			if tc.wantUsage {
				final := decode[chatBody](t, []byte(events[len(events)-2].data))
				want := chatUsage{promptTokens(body), words, promptTokens(body) + words}
				if final.Choices == nil || len(final.Choices) != 0 || final.Usage == nil || *final.Usage != want {
					t.Errorf("usage chunk = %s, want choices [] and usage %+v", events[len(events)-2].data, want)
				}
			}
		})
	}
}

// checkChatChunks checks every chunk's shape and "usage": null (but the
// usage chunk's) and returns the streamed text and its word count.
func checkChatChunks(t *testing.T, events []sseMsg, usageLast bool) (string, int) {
	t.Helper()
	var text strings.Builder
	finishes := 0
	for i, e := range events {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(e.data), &raw); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		isUsage := usageLast && i == len(events)-1
		if u, ok := raw["usage"]; !ok || (string(u) == "null") == isUsage {
			t.Errorf("event %d usage = %s (present %v)", i, u, ok)
		}
		c := decode[chatBody](t, []byte(e.data))
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("event %d object %q id %q", i, c.Object, c.ID)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				finishes++
			}
		}
	}
	if finishes != 1 {
		t.Errorf("%d chunks with finish_reason, want 1", finishes)
	}
	return text.String(), len(strings.Fields(text.String()))
}

type responseBody struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	Status    string `json:"status"`
	Output    []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (r responseBody) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func TestResponses(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantText   string
		wantStatus string
	}{
		{"string input", `{"model":"gpt-test","input":"hello"}`, reply1, "completed"},
		{"item list", `{"model":"gpt-test","input":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, reply2, "completed"},
		{"max_output_tokens", `{"input":"hello","max_output_tokens":3}`, "echo: 1 messages", "incomplete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, _, b := post(t, srv, "/v1/responses", tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			got := decode[responseBody](t, b)
			checkResponse(t, got, tc.body, tc.wantText, tc.wantStatus)
		})
	}
}

func checkResponse(t *testing.T, got responseBody, body, wantText, wantStatus string) {
	t.Helper()
	words := len(strings.Fields(wantText))
	switch {
	case got.Object != "response" || !strings.HasPrefix(got.ID, "resp_") || got.CreatedAt != t0.Unix():
		t.Errorf("object %q id %q created_at %d", got.Object, got.ID, got.CreatedAt)
	case got.Status != wantStatus || got.text() != wantText:
		t.Errorf("status %q text %q, want %q %q", got.Status, got.text(), wantStatus, wantText)
	case got.Usage == nil:
		t.Errorf("no usage")
	case got.Usage.InputTokens != promptTokens(body) || got.Usage.OutputTokens != words ||
		got.Usage.TotalTokens != promptTokens(body)+words:
		t.Errorf("usage = %+v, want input %d output %d", *got.Usage, promptTokens(body), words)
	}
}

func TestResponsesStream(t *testing.T) {
	tests := []struct {
		name         string
		body         string
		wantTerminal string
		wantText     string
	}{
		{"completed", `{"input":"hello","stream":true}`, "response.completed", reply1},
		{"incomplete", `{"input":"hello","stream":true,"max_output_tokens":4}`, "response.incomplete", "echo: 1 messages this"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			_, _, b := post(t, srv, "/v1/responses", tc.body)
			events := parseSSE(t, b)
			var deltas strings.Builder
			for i, e := range events {
				ev := decode[struct {
					Type     string  `json:"type"`
					Sequence *int    `json:"sequence_number"`
					Delta    *string `json:"delta"`
				}](t, []byte(e.data))
				if ev.Type != e.event || ev.Sequence == nil || *ev.Sequence != i {
					t.Errorf("event %d: event %q type %q sequence_number %v", i, e.event, ev.Type, ev.Sequence)
				}
				if ev.Type == "response.output_text.delta" {
					deltas.WriteString(*ev.Delta)
				}
			}
			if events[0].event != "response.created" || events[len(events)-1].event != tc.wantTerminal {
				t.Fatalf("events from %q to %q", events[0].event, events[len(events)-1].event)
			}
			if deltas.String() != tc.wantText {
				t.Errorf("deltas = %q, want %q", deltas.String(), tc.wantText)
			}
			final := decode[struct {
				Response responseBody `json:"response"`
			}](t, []byte(events[len(events)-1].data))
			wantStatus := strings.TrimPrefix(tc.wantTerminal, "response.")
			checkResponse(t, final.Response, tc.body, tc.wantText, wantStatus)
		})
	}
}

func TestEmbeddings(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantN    int
		wantDims int
		base64   bool
	}{
		{"one string", `{"model":"e","input":"hello"}`, 1, 8, false},
		{"three strings", `{"input":["a","b","c"]}`, 3, 8, false},
		{"token array", `{"input":[1,2,3]}`, 1, 8, false},
		{"token arrays", `{"input":[[1,2],[3]]}`, 2, 8, false},
		{"dimensions", `{"input":"x","dimensions":4}`, 1, 4, false},
		{"base64", `{"input":["x","y"],"encoding_format":"base64"}`, 2, 8, true},
		{"no input", `{}`, 0, 8, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, _, b := post(t, srv, "/v1/embeddings", tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			got := decode[struct {
				Object string `json:"object"`
				Data   []struct {
					Index     int             `json:"index"`
					Embedding json.RawMessage `json:"embedding"`
				} `json:"data"`
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
					TotalTokens  int `json:"total_tokens"`
				} `json:"usage"`
			}](t, b)
			if got.Object != "list" || len(got.Data) != tc.wantN {
				t.Fatalf("object %q, %d items, want %d", got.Object, len(got.Data), tc.wantN)
			}
			if got.Usage.PromptTokens != promptTokens(tc.body) || got.Usage.TotalTokens != promptTokens(tc.body) {
				t.Errorf("usage = %+v", got.Usage)
			}
			for i, d := range got.Data {
				if n := embeddingLen(t, d.Embedding, tc.base64); d.Index != i || n != tc.wantDims {
					t.Errorf("item %d: index %d, %d dims, want %d", i, d.Index, n, tc.wantDims)
				}
			}
		})
	}
}

func embeddingLen(t *testing.T, raw json.RawMessage, isBase64 bool) int {
	t.Helper()
	if !isBase64 {
		return len(decode[[]float32](t, raw))
	}
	b, err := base64.StdEncoding.DecodeString(decode[string](t, raw))
	if err != nil {
		t.Fatal(err)
	}
	return len(b) / 4
}
