package fakeprovider_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type messageBody struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason *string         `json:"stop_reason"`
	Usage      *anthropicUsage `json:"usage"`
}

const claudeTwo = `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`

func TestMessages(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantText string
		wantStop string
	}{
		{"two messages", claudeTwo + `}`, reply2, "end_turn"},
		{"max_tokens", `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "echo: 1 messages this is", "max_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, _, b := post(t, srv, "/v1/messages", tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			got := decode[messageBody](t, b)
			want := anthropicUsage{promptTokens(tc.body), len(strings.Fields(tc.wantText))}
			switch {
			case got.Type != "message" || got.Role != "assistant" || !strings.HasPrefix(got.ID, "msg_"):
				t.Errorf("type %q role %q id %q", got.Type, got.Role, got.ID)
			case len(got.Content) != 1 || got.Content[0].Type != "text" || got.Content[0].Text != tc.wantText:
				t.Errorf("content = %+v, want %q", got.Content, tc.wantText)
			case got.StopReason == nil || *got.StopReason != tc.wantStop:
				t.Errorf("stop_reason = %v, want %q", got.StopReason, tc.wantStop)
			case got.Usage == nil || *got.Usage != want:
				t.Errorf("usage = %+v, want %+v", got.Usage, want)
			}
		})
	}
}

func TestMessagesStream(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{StreamChunks: 3})
	body := claudeTwo + `,"stream":true}`
	status, header, b := post(t, srv, "/v1/messages", body)
	if status != http.StatusOK || header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", status, header.Get("Content-Type"))
	}
	events := parseSSE(t, b)
	var names []string
	var text strings.Builder
	for _, e := range events {
		names = append(names, e.event)
		ev := decode[struct {
			Type  string `json:"type"`
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
		}](t, []byte(e.data))
		if ev.Type != e.event {
			t.Errorf("event %q has type %q", e.event, ev.Type)
		}
		if ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta " +
		"content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events = %s\nwant     %s", got, want)
	}
	if text.String() != reply2 {
		t.Errorf("text = %q, want %q", text.String(), reply2)
	}
	start := decode[struct {
		Message messageBody `json:"message"`
	}](t, []byte(events[0].data))
	if u := start.Message.Usage; u == nil || *u != (anthropicUsage{promptTokens(body), 1}) {
		t.Errorf("message_start usage = %+v, want input %d output 1", u, promptTokens(body))
	}
	delta := decode[struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
		Usage map[string]int `json:"usage"`
	}](t, []byte(events[len(events)-2].data))
	words := len(strings.Fields(reply2))
	if delta.Delta.StopReason != "end_turn" || len(delta.Usage) != 1 || delta.Usage["output_tokens"] != words {
		t.Errorf("message_delta = %s, want end_turn and usage {output_tokens: %d}", events[len(events)-2].data, words)
	}
}

func TestBatches(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   string
		check  func(t *testing.T, b []byte)
		header string // rate-limit header that must be absent
	}{
		{"openai", "/v1/batches", `{"input_file_id":"FILE","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"k":"v"}}`,
			func(t *testing.T, b []byte) {
				got := decode[struct {
					ID          string            `json:"id"`
					Object      string            `json:"object"`
					Endpoint    string            `json:"endpoint"`
					InputFileID string            `json:"input_file_id"`
					Status      string            `json:"status"`
					CreatedAt   int64             `json:"created_at"`
					Metadata    map[string]string `json:"metadata"`
				}](t, b)
				if !strings.HasPrefix(got.ID, "batch_") || got.Object != "batch" || got.Status != "validating" ||
					got.Endpoint != "/v1/chat/completions" || !strings.HasPrefix(got.InputFileID, "file-") ||
					got.CreatedAt != t0.Unix() || got.Metadata["k"] != "v" {
					t.Errorf("batch = %s", b)
				}
			}, "x-ratelimit-limit-requests"},
		{"anthropic", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{}},{"custom_id":"b","params":{}}]}`,
			func(t *testing.T, b []byte) {
				got := decode[struct {
					ID               string `json:"id"`
					Type             string `json:"type"`
					ProcessingStatus string `json:"processing_status"`
					RequestCounts    struct {
						Processing int `json:"processing"`
					} `json:"request_counts"`
					CreatedAt time.Time `json:"created_at"`
				}](t, b)
				if !strings.HasPrefix(got.ID, "msgbatch_") || got.Type != "message_batch" ||
					got.ProcessingStatus != "in_progress" || got.RequestCounts.Processing != 2 || !got.CreatedAt.Equal(t0) {
					t.Errorf("batch = %s", b)
				}
			}, "anthropic-ratelimit-requests-limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{RPM: 1})
			body := strings.ReplaceAll(tc.body, "FILE", uploadFile(t, srv, "batch", `{"custom_id":"a","body":{}}`+"\n"))
			for i := range 3 { // batch endpoints have their own quota: RPM 1 does not apply
				status, header, b := post(t, srv, tc.path, body)
				if status != http.StatusOK || header.Get(tc.header) != "" {
					t.Fatalf("request %d: status %d, %s = %q", i, status, tc.header, header.Get(tc.header))
				}
				tc.check(t, b)
			}
			if got := p.Arrivals()[t0.Unix()]; got != 4 {
				t.Errorf("arrivals = %d, want 4", got)
			}
		})
	}
}
