package fakeprovider_test

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/realtime"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestOpenAISDKResponsesSocket: the official SDK's Responses WebSocket
// decodes the fake's events — a turn's text and usage, and the error
// event of a turn its rate limit refuses, with status, code and headers.
func TestOpenAISDKResponsesSocket(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{RPM: 1})
	client := sdkClient(srv)
	conn, err := client.Beta.Responses.Connect(t.Context(), openai.BetaResponseConnectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	send := func(s string) {
		t.Helper()
		if err := conn.SendRaw(t.Context(), json.RawMessage(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"response.create","model":"gpt-test","input":"hi"}`)
	var text string
	for {
		ev, err := conn.Recv(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "response.output_text.delta" {
			text += ev.AsResponseOutputTextDelta().Delta
		}
		if ev.Type == "response.completed" {
			u := ev.AsResponseCompleted().Response.Usage
			if text != reply1 || u.OutputTokens != 9 || u.InputTokens == 0 || u.TotalTokens != u.InputTokens+9 {
				t.Errorf("text %q, usage %s", text, u.RawJSON())
			}
			break
		}
	}
	send(`{"type":"response.create","model":"gpt-test","input":"refused","stream_id":"lane"}`)
	ev, err := conn.Recv(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e := ev.AsBetaResponsesServerEventBetaResponseWsError()
	if ev.Type != "error" || e.Status != 429 || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "rate_limit_error" ||
		e.StreamID != "lane" || e.Error.Headers["retry-after"] == "" {
		t.Errorf("refusal %s", ev.RawJSON())
	}
	_ = conn.Close()
	if err := p.WaitSocketsClosed(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAISDKRealtime: the official SDK's Realtime connection decodes
// the fake's session, response.done usage and rate_limits.updated.
func TestOpenAISDKRealtime(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{RPM: 600, TPM: 100000})
	client := sdkClient(srv)
	conn, err := client.Realtime.Connect(t.Context(), realtime.RealtimeConnectionOptions{}, option.WithQuery("model", "gpt-realtime"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	first, err := conn.Recv(t.Context())
	if err != nil || first.Type != "session.created" {
		t.Fatalf("first event %v, %v", first.RawJSON(), err)
	}
	for _, s := range []string{textOnly, `{"type":"conversation.item.create","item":` + rtItem + `}`, `{"type":"response.create"}`} {
		if err := conn.SendRaw(t.Context(), json.RawMessage(s)); err != nil {
			t.Fatal(err)
		}
	}
	in := int64(promptTokens(rtItem))
	for {
		ev, err := conn.Recv(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "error":
			t.Fatalf("error %s", ev.RawJSON())
		case "response.done":
			u := ev.AsResponseDoneEvent().Response.Usage
			if u.InputTokens != in || u.InputTokenDetails.TextTokens != in || u.OutputTokens != 9 || u.OutputTokenDetails.TextTokens != 9 || u.TotalTokens != in+9 {
				t.Errorf("usage %s", u.RawJSON())
			}
		case "rate_limits.updated":
			l := ev.AsRateLimitsUpdatedEvent().RateLimits
			if len(l) != 2 || l[0].Name != "requests" || l[0].Limit != 600 || l[0].Remaining != 599 || l[1].Name != "tokens" || l[1].Remaining != 100000-in {
				t.Errorf("rate limits %s", ev.RawJSON())
			}
			return
		}
	}
}
