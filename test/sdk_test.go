package test

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const (
	callerKey   = "sk-e2e-caller-0123456789abcdef"
	upstreamKey = "sk-e2e-upstream-fedcba9876543210"
)

// fixedNow makes the fake provider's bytes reproducible.
func fixedNow() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

func TestOpenAISDKThroughProxy(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow, RecordBodies: true})
	up := startUpstream(t, fake)
	p := startProxy(t, baseConfig(up.URL), nil, callerKey)

	client := openai.NewClient(option.WithBaseURL(p.URL+"/v1/"), option.WithAPIKey(callerKey), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}
	chat, err := client.Chat.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" || chat.Usage.TotalTokens == 0 {
		t.Errorf("chat completion %+v", chat)
	}

	params.StreamOptions.IncludeUsage = openai.Bool(true)
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != chat.Choices[0].Message.Content || acc.Usage.CompletionTokens != chat.Usage.CompletionTokens {
		t.Errorf("streamed %q (%d completion tokens), want %q (%d)", acc.Choices[0].Message.Content, acc.Usage.CompletionTokens,
			chat.Choices[0].Message.Content, chat.Usage.CompletionTokens)
	}
	for _, r := range fake.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+callerKey {
			t.Errorf("upstream saw Authorization %q, want the caller's key passed through", got)
		}
	}
}

func TestBytesIdenticalThroughProxy(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow, ChunkInterval: time.Millisecond})
	up := startUpstream(t, fake)
	p := startProxy(t, baseConfig(up.URL), nil, callerKey)
	client := newClient(t, 4)
	auth := map[string]string{"Authorization": "Bearer " + callerKey}
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
		{"/v1/messages", `{"model":"claude","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/embeddings", `{"model":"e","input":"hi"}`},
		{"/v1/chat/completions", `{"model": "m", "messages": [`}, // malformed: forwarded untouched
	} {
		direct, _, want := post(t, client, up.URL+tc.path, tc.body, auth)
		status, _, got := post(t, client, p.URL+tc.path, tc.body, auth)
		if status != direct || !bytes.Equal(got, want) {
			t.Errorf("%s %s: through the proxy %d %q, direct %d %q", tc.path, tc.body, status, got, direct, want)
		}
	}
}

func TestFirstChunkBeforeUpstreamFinishes(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow})
	up := startUpstream(t, fake)
	p := startProxy(t, baseConfig(up.URL), nil)
	// The upstream sends one chunk, then never finishes until we leave: the
	// chunk can only reach us if the proxy does not buffer.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(fakeprovider.HeaderStallAfter, "1")
	client := newClient(t, 1)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q, %v", line, err)
	}
}

func TestUpstreamKeyReplacesCallers(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow})
	up := startUpstream(t, fake)
	environ := []string{"METERPROXY_UPSTREAM_API_KEY=" + upstreamKey, "CALLER_KEY=" + callerKey}
	cfg := baseConfig(up.URL)
	// With the provider key set, only configured callers may spend it.
	cfg.set("callers", []map[string]any{{"name": "sdk", "key_env": "CALLER_KEY", "class": "interactive"}})
	cfg.set("classify.unknown_callers", "reject")
	p := startProxy(t, cfg, environ, callerKey, upstreamKey)
	client := newClient(t, 2)
	post(t, client, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, map[string]string{"Authorization": "Bearer " + callerKey})
	post(t, client, p.URL+"/v1/messages", `{"model":"c","max_tokens":5,"messages":[]}`, map[string]string{"X-Api-Key": callerKey})
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(reqs))
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Errorf("chat: upstream saw a different Authorization than the configured key (len %d)", len(got))
	}
	if got := reqs[1].Header.Get("X-Api-Key"); got != upstreamKey || reqs[1].Header.Get("Authorization") != "" {
		t.Errorf("messages: upstream x-api-key is not the configured key (len %d)", len(got))
	}
}
