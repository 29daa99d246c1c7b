package fakeprovider

import (
	"encoding/json"
	"net/http"
)

// messagesRequest is the part of an Anthropic Messages request the fake
// reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	Stream    bool              `json:"stream"`
	MaxTokens int               `json:"max_tokens"`
}

type anthropicMessage struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []anthropicText `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        anthropicUsage  `json:"usage"`
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicUsage has the field names of Anthropic's Usage.
type anthropicUsage struct {
	InputTokens              int    `json:"input_tokens"`
	OutputTokens             int    `json:"output_tokens"`
	CacheCreationInputTokens int    `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int    `json:"cache_read_input_tokens"`
	ServiceTier              string `json:"service_tier"`
}

// messages answers POST /v1/messages.
func (x *exchange) messages() {
	var req messagesRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	in, cached, ok := x.promptUsage()
	if !ok {
		return
	}
	rep := newReply(len(req.Messages), req.MaxTokens, x.p.cfg.StreamChunks)
	x.p.chargeOutput(x.arr, x.now, len(rep.words))
	x.usage = &Usage{InputTokens: in, CachedTokens: cached, OutputTokens: len(rep.words), TotalTokens: in + len(rep.words)}
	stop := "end_turn"
	if rep.truncated {
		stop = "max_tokens"
	}
	msg := anthropicMessage{
		ID:         bodyID("msg_", x.body),
		Type:       "message",
		Role:       "assistant",
		Model:      modelOr(req.Model),
		Content:    []anthropicText{{Type: "text", Text: rep.text}},
		StopReason: &stop,
		Usage: anthropicUsage{
			InputTokens:          in - cached,
			CacheReadInputTokens: cached,
			OutputTokens:         len(rep.words),
			ServiceTier:          anthropicTier,
		},
	}
	if req.Stream {
		x.stream(messageStream(msg, rep))
		return
	}
	x.writeJSON(http.StatusOK, msg)
}

// messageStream is the event sequence of a streamed message: message_start
// (its input, cache and tier, output_tokens 1), one text block with a ping after its start, then
// message_delta with the cumulative output tokens and message_stop.
func messageStream(msg anthropicMessage, rep reply) streamPlan {
	type obj = map[string]any
	ev := func(typ string, fields obj) sseEvent {
		fields["type"] = typ
		return sseEvent{name: typ, data: fields}
	}
	start := msg
	start.Content, start.StopReason = []anthropicText{}, nil
	start.Usage.OutputTokens = 1
	var plan streamPlan
	plan.head = []sseEvent{
		ev("message_start", obj{"message": start}),
		ev("content_block_start", obj{"index": 0, "content_block": anthropicText{Type: "text", Text: ""}}),
		ev("ping", obj{}),
	}
	for _, text := range rep.chunks {
		plan.chunks = append(plan.chunks, ev("content_block_delta", obj{"index": 0, "delta": obj{"type": "text_delta", "text": text}}))
	}
	plan.tail = []sseEvent{
		ev("content_block_stop", obj{"index": 0}),
		ev("message_delta", obj{
			"delta": obj{"stop_reason": *msg.StopReason, "stop_sequence": nil},
			"usage": obj{"output_tokens": msg.Usage.OutputTokens},
		}),
		ev("message_stop", obj{}),
	}
	return plan
}
