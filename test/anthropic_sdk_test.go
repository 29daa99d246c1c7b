package test

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestAnthropicSDKThroughProxy: the official Anthropic Go SDK, pointed at
// meterproxy, creates a message and streams one from the fake provider's
// /v1/messages; the replies and their usage arrive intact, the proxy counts
// that usage as reported tokens of the caller, and the upstream sees the
// caller's own x-api-key.
func TestAnthropicSDKThroughProxy(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow, RecordBodies: true})
	up := startUpstream(t, fake)
	p := startProxy(t, probeConfig(up.URL), probeEnv, callerKey)

	client := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(), // no ANTHROPIC_* of the machine running the test
		option.WithBaseURL(p.URL+"/"),
		option.WithAPIKey(callerKey),
		option.WithMaxRetries(0),
	)
	params := anthropic.MessageNewParams{
		Model:     "claude-test",
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	}
	const wantText = "echo: 1 messages this is a deterministic fake reply" // the fake's reply to one message
	wantOut := int64(len(strings.Fields(wantText)))                        // one token a word

	// inputOf is what the fake bills for the request the upstream received
	// last: a quarter of its bytes, rounded up.
	inputOf := func() int64 {
		reqs := fake.Requests()
		return int64((len(reqs[len(reqs)-1].Body) + 3) / 4)
	}

	before := readTokens(scrape(t, p.AdminURL), probeCaller)
	msg, err := client.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != wantText || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("message %+v, want one text block %q ending the turn", msg.Content, wantText)
	}
	want := tokenCount{msg.Usage.InputTokens + msg.Usage.CacheCreationInputTokens + msg.Usage.CacheReadInputTokens, msg.Usage.OutputTokens}
	if in := inputOf(); msg.Usage.InputTokens != in || msg.Usage.OutputTokens != wantOut {
		t.Errorf("usage %d in / %d out, want %d / %d", msg.Usage.InputTokens, msg.Usage.OutputTokens, in, wantOut)
	}
	if d := tokensAfter(t, p.AdminURL, probeCaller, before, 1); d.reported != want || d.estimated != (tokenCount{}) {
		t.Errorf("Messages.New: proxy counted %v reported, %v estimated; the SDK got %v", d.reported, d.estimated, want)
	}

	before = readTokens(scrape(t, p.AdminURL), probeCaller)
	stream := client.Messages.NewStreaming(t.Context(), params)
	var acc anthropic.Message
	var deltas strings.Builder
	events := 0
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_delta" {
			deltas.WriteString(ev.Delta.Text)
		}
		events++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Close(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != wantText || deltas.String() != wantText {
		t.Errorf("streamed %+v (deltas %q), want %q", acc.Content, deltas.String(), wantText)
	}
	want = tokenCount{acc.Usage.InputTokens + acc.Usage.CacheCreationInputTokens + acc.Usage.CacheReadInputTokens, acc.Usage.OutputTokens}
	if in := inputOf(); acc.Usage.InputTokens != in || acc.Usage.OutputTokens != wantOut {
		t.Errorf("streamed usage %d in / %d out, want %d / %d", acc.Usage.InputTokens, acc.Usage.OutputTokens, in, wantOut)
	}
	if d := tokensAfter(t, p.AdminURL, probeCaller, before, 1); d.reported != want || d.estimated != (tokenCount{}) {
		t.Errorf("Messages.NewStreaming: proxy counted %v reported, %v estimated; the SDK got %v", d.reported, d.estimated, want)
	}

	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.Path != "/v1/messages" {
			t.Errorf("request %d: upstream path %q, want /v1/messages", i, r.Path)
		}
		if r.Header.Get("X-Api-Key") != callerKey || r.Header.Get("Authorization") != "" {
			t.Errorf("request %d: the upstream did not get the caller's x-api-key alone (x-api-key len %d, authorization len %d)",
				i, len(r.Header.Get("X-Api-Key")), len(r.Header.Get("Authorization")))
		}
		if r.Header.Get("Anthropic-Version") == "" {
			t.Errorf("request %d: anthropic-version was not forwarded", i)
		}
	}
	t.Logf("Messages.New and NewStreaming (%d events) through the proxy: %q, usage %v each", events, wantText, want)
}
