package fakeprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestChatMaxOutput: an output limit a model cannot produce is answered
// 400 as OpenAI answers it, the last of duplicate keys counting.
func TestChatMaxOutput(t *testing.T) {
	tests := []struct {
		name, fields string
		want         int
	}{
		{"absent", ``, http.StatusOK},
		{"within", `,"max_tokens":100`, http.StatusOK},
		{"at the limit", `,"max_completion_tokens":4096`, http.StatusOK},
		{"above the limit", `,"max_tokens":4097`, http.StatusBadRequest},
		{"2^48", `,"max_tokens":281474976710656`, http.StatusBadRequest},
		{"1e300", `,"max_tokens":1e300`, http.StatusBadRequest},
		{"negative", `,"max_tokens":-1`, http.StatusBadRequest},
		{"a string", `,"max_tokens":"100"`, http.StatusBadRequest},
		{"the last duplicate is read", `,"max_tokens":1,"max_tokens":8000`, http.StatusBadRequest},
		{"null", `,"max_tokens":null`, http.StatusOK},
	}
	_, srv := newServer(t, fakeprovider.Config{MaxOutputTokens: 4096})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := post(t, srv, "/v1/chat/completions", twoMessages+tc.fields+`}`)
			if status != tc.want {
				t.Fatalf("status %d, want %d: %s", status, tc.want, b)
			}
		})
	}
}

// TestChatReplyShape: X-Fake-Reply-Bytes pads a reply, counted in its
// usage, and X-Fake-Tool-Call carries the text as a tool call's
// arguments, in JSON and in a stream.
func TestChatReplyShape(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	const size = 100_000
	status, _, b := send(t, srv, http.MethodPost, "/v1/chat/completions", twoMessages+`}`,
		map[string]string{fakeprovider.HeaderReplyBytes: "100000", fakeprovider.HeaderToolCall: "true"})
	if status != http.StatusOK {
		t.Fatalf("status %d: %.200s", status, b)
	}
	var got struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Function struct{ Name, Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &got); err != nil || len(got.Choices) != 1 || len(got.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("decode: %v: %.300s", err, b)
	}
	msg := got.Choices[0].Message
	args := msg.ToolCalls[0].Function.Arguments
	if msg.Content != nil || len(args) < size || len(args) > size+16 || !strings.HasPrefix(args, reply2) {
		t.Errorf("content %v, %d bytes of arguments, want none and about %d starting %q", msg.Content, len(args), size, reply2)
	}
	if words := len(strings.Fields(args)); got.Usage.CompletionTokens != words || got.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("completion_tokens %d for %d words, finish %q", got.Usage.CompletionTokens, words, got.Choices[0].FinishReason)
	}

	status, _, b = send(t, srv, http.MethodPost, "/v1/chat/completions", twoMessages+`,"stream":true}`,
		map[string]string{fakeprovider.HeaderReplyBytes: "100000", fakeprovider.HeaderToolCall: "1"})
	if status != http.StatusOK {
		t.Fatalf("stream status %d", status)
	}
	var streamed strings.Builder
	for _, ev := range parseSSE(t, b) {
		if ev.data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %.100s: %v", ev.data, err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				streamed.WriteString(tc.Function.Arguments)
			}
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				t.Errorf("content delta %q in a tool-call stream", *ch.Delta.Content)
			}
		}
	}
	if streamed.String() != args {
		t.Errorf("streamed arguments (%d bytes) differ from the JSON answer's (%d)", streamed.Len(), len(args))
	}

	if status, _, _ := send(t, srv, http.MethodPost, "/v1/chat/completions", twoMessages+`}`,
		map[string]string{fakeprovider.HeaderReplyBytes: "99999999"}); status != http.StatusBadRequest {
		t.Errorf("a reply above 16 MiB answered %d, want 400", status)
	}
}

// TestChatHoldTail: X-Fake-Hold-Tail sends all of a JSON answer but its
// last 256 bytes, as many as X-Fake-Sent-Bytes says, and ends when the
// client goes away.
func TestChatHoldTail(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(twoMessages+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(fakeprovider.HeaderReplyBytes, "50000")
	req.Header.Set(fakeprovider.HeaderHoldTail, "true")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	sent, err := strconv.Atoi(res.Header.Get(fakeprovider.HeaderSentBytes))
	if err != nil || res.StatusCode != http.StatusOK || sent < 50_000 {
		t.Fatalf("status %d, %s %q: %v", res.StatusCode, fakeprovider.HeaderSentBytes, res.Header.Get(fakeprovider.HeaderSentBytes), err)
	}
	head := make([]byte, sent)
	if _, err := io.ReadFull(res.Body, head); err != nil {
		t.Fatalf("reading the %d bytes sent: %v", sent, err)
	}
	if bytes.Contains(head, []byte(`"usage"`)) {
		t.Error("the usage was sent before the hold")
	}
	cancel()
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Error("the held answer ended whole, want it broken off when the client left")
	}
}
