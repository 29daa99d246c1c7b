package fakeprovider

import (
	"encoding/json"
	"net/http"
)

// completionRequest is the part of a legacy completions request the fake
// reads.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	MaxTokens     int             `json:"max_tokens"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// textCompletion is both a legacy completion and a chunk of its stream:
// object "text_completion" either way, as OpenAI sends it.
type textCompletion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *chatUsage         `json:"usage"`
}

type completionChoice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// completion answers POST /v1/completions (and Azure's deployment
// /completions): the reply's text in choices[0].text, Chat Completions'
// usage; streamed, a chunk per piece of text, the usage chunk (choices
// empty) when stream_options.include_usage asks for it, then [DONE].
func (x *exchange) completion() {
	var req completionRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	rep := newReply(countItems(req.Prompt), req.MaxTokens, x.p.cfg.StreamChunks)
	in := promptTokens(x.body)
	usage := &chatUsage{PromptTokens: in, CompletionTokens: len(rep.words), TotalTokens: in + len(rep.words)}
	finish := "stop"
	if rep.truncated {
		finish = "length"
	}
	base := textCompletion{ID: bodyID("cmpl-", x.body), Object: "text_completion", Created: x.now.Unix(), Model: modelOr(req.Model)}
	if !req.Stream {
		base.Choices = []completionChoice{{Text: rep.text, FinishReason: &finish}}
		base.Usage = usage
		x.writeJSON(http.StatusOK, base)
		return
	}
	chunk := func(text string, finish *string) sseEvent {
		c := base
		c.Choices = []completionChoice{{Text: text, FinishReason: finish}}
		return sseEvent{data: c}
	}
	var plan streamPlan
	for _, text := range rep.chunks {
		plan.chunks = append(plan.chunks, chunk(text, nil))
	}
	plan.tail = append(plan.tail, chunk("", &finish))
	if req.StreamOptions.IncludeUsage {
		last := base
		last.Choices, last.Usage = []completionChoice{}, usage
		plan.tail = append(plan.tail, sseEvent{data: last})
	}
	plan.tail = append(plan.tail, sseEvent{data: "[DONE]"})
	x.stream(plan)
}
