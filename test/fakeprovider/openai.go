package fakeprovider

import (
	"encoding/json"
	"net/http"
)

// chatRequest is the part of a chat completion request the fake reads.
type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []json.RawMessage `json:"messages"`
	Stream              bool              `json:"stream"`
	MaxTokens           int               `json:"max_tokens"`
	MaxCompletionTokens int               `json:"max_completion_tokens"`
	ServiceTier         string            `json:"service_tier"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatCompletion is both a chat.completion and a chat.completion.chunk;
// every chunk names the service tier, as OpenAI's do.
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *chatUsage   `json:"usage"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatMessage `json:"delta,omitempty"`
	Logprobs     *struct{}    `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

type chatMessage struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

// chatToolCall is one tool call of a message, or its delta in a stream
// (id, type and name on the first delta only).
type chatToolCall struct {
	Index    int              `json:"index"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// fakeTool is the function a HeaderToolCall reply calls.
const fakeTool = "fake_tool"

// toolCallDelta is the delta carrying part of a tool call's arguments; the
// first names the call.
func toolCallDelta(args string, first bool) chatMessage {
	tc := chatToolCall{Function: chatToolFunction{Arguments: args}}
	if first {
		tc.ID, tc.Type, tc.Function.Name = "call_fake", "function", fakeTool
	}
	return chatMessage{ToolCalls: []chatToolCall{tc}}
}

// chatUsage has the field names of OpenAI's CompletionUsage.
type chatUsage struct {
	PromptTokens            int            `json:"prompt_tokens"`
	CompletionTokens        int            `json:"completion_tokens"`
	TotalTokens             int            `json:"total_tokens"`
	PromptTokensDetails     cachedTokens   `json:"prompt_tokens_details"`
	CompletionTokensDetails reasoningCount `json:"completion_tokens_details"`
}

type cachedTokens struct {
	CachedTokens int `json:"cached_tokens"`
}

type reasoningCount struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// chat answers POST /v1/chat/completions.
func (x *exchange) chat() {
	var req chatRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	sh, err := parseShape(x.r.Header)
	if err != nil {
		x.fail(http.StatusBadRequest, err.Error())
		return
	}
	if !x.checkMaxOutput(x.p.cfg.MaxOutputTokens) {
		return
	}
	if x.refuseFlex(req.ServiceTier) {
		return
	}
	limit := req.MaxCompletionTokens
	if limit == 0 {
		limit = req.MaxTokens
	}
	rep := newReply(len(req.Messages), limit, x.p.cfg.StreamChunks).padded(sh.bytes, x.p.cfg.StreamChunks)
	in, cached, ok := x.promptUsage()
	if !ok {
		return
	}
	usage := &chatUsage{PromptTokens: in, CompletionTokens: len(rep.words), TotalTokens: in + len(rep.words),
		PromptTokensDetails:     cachedTokens{CachedTokens: cached},
		CompletionTokensDetails: reasoningCount{ReasoningTokens: reasoningOf(modelOr(req.Model), len(rep.words))}}
	x.usage = &Usage{InputTokens: in, CachedTokens: cached, OutputTokens: len(rep.words), TotalTokens: in + len(rep.words)}
	finish := "stop"
	if rep.truncated {
		finish = "length"
	}
	base := chatCompletion{
		ID:                bodyID("chatcmpl-", x.body),
		Object:            "chat.completion",
		Created:           x.now.Unix(),
		Model:             modelOr(req.Model),
		ServiceTier:       servedTier(req.ServiceTier),
		SystemFingerprint: "fp_fake",
	}
	if sh.toolCall && !rep.truncated {
		finish = "tool_calls"
	}
	if req.Stream {
		x.stream(chatStream(base, rep, finish, usage, req.StreamOptions.IncludeUsage, sh.toolCall))
		return
	}
	msg := chatMessage{Role: "assistant", Content: &rep.text}
	if sh.toolCall {
		msg.Content, msg.ToolCalls = nil, []chatToolCall{{ID: "call_fake", Type: "function",
			Function: chatToolFunction{Name: fakeTool, Arguments: rep.text}}}
	}
	base.Choices = []chatChoice{{Message: &msg, FinishReason: &finish}}
	base.Usage = usage
	if sh.holdTail {
		x.writeJSONHoldingTail(base)
		return
	}
	x.writeJSON(http.StatusOK, base)
}

// chatStream is the chunk sequence of a streamed chat completion: a role
// chunk, the content chunks (tool-call argument chunks with toolCall), a
// finish chunk, the usage chunk when asked for, then [DONE]. Every chunk
// but the usage one has "usage": null.
func chatStream(base chatCompletion, rep reply, finish string, usage *chatUsage, includeUsage, toolCall bool) streamPlan {
	base.Object = "chat.completion.chunk"
	chunk := func(delta chatMessage, finish *string) sseEvent {
		c := base
		c.Choices = []chatChoice{{Delta: &delta, FinishReason: finish}}
		return sseEvent{data: c}
	}
	empty := ""
	plan := streamPlan{head: []sseEvent{chunk(chatMessage{Role: "assistant", Content: &empty}, nil)}}
	for i, text := range rep.chunks {
		delta := chatMessage{Content: &text}
		if toolCall {
			delta = toolCallDelta(text, i == 0)
		}
		plan.chunks = append(plan.chunks, chunk(delta, nil))
	}
	plan.tail = append(plan.tail, chunk(chatMessage{}, &finish))
	if includeUsage {
		last := base
		last.Choices = []chatChoice{}
		last.Usage = usage
		plan.tail = append(plan.tail, sseEvent{data: last})
	}
	plan.tail = append(plan.tail, sseEvent{data: "[DONE]"})
	return plan
}
