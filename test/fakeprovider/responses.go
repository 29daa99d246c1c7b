package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
)

// responsesRequest is the part of a Responses API request the fake reads.
type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens int             `json:"max_output_tokens"`
	ServiceTier     string          `json:"service_tier"`
	// Generate false is a warmup (OpenAI's WebSocket mode): the request's
	// state prepared, no output generated.
	Generate *bool `json:"generate"`
}

type responseObject struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []outputItem       `json:"output"`
	ServiceTier       string             `json:"service_tier"`
	Usage             *responseUsage     `json:"usage"`
	// Error is a failed response's error; absent otherwise.
	Error *responseError `json:"error,omitempty"`
}

// responseError is the error of a failed response.
type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type outputItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// responseUsage has the field names of OpenAI's ResponseUsage.
type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  cachedTokens   `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails reasoningCount `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

// responses answers POST /v1/responses.
func (x *exchange) responses() {
	var req responsesRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	if x.refuseFlex(req.ServiceTier) {
		return
	}
	rep := newReply(countItems(req.Input), req.MaxOutputTokens, x.p.cfg.StreamChunks)
	in, cached, ok := x.promptUsage()
	if !ok {
		return
	}
	done := responseObject{
		ID:          bodyID("resp_", x.body),
		Object:      "response",
		CreatedAt:   x.now.Unix(),
		Status:      "completed",
		Model:       modelOr(req.Model),
		Output:      []outputItem{messageItem(bodyID("msg_", x.body), "completed", rep.text)},
		ServiceTier: servedTier(req.ServiceTier),
		Usage: &responseUsage{InputTokens: in, InputTokensDetails: cachedTokens{CachedTokens: cached},
			OutputTokens: len(rep.words), TotalTokens: in + len(rep.words),
			OutputTokensDetails: reasoningCount{ReasoningTokens: reasoningOf(modelOr(req.Model), len(rep.words))}},
	}
	x.usage = &Usage{InputTokens: in, CachedTokens: cached, OutputTokens: len(rep.words), TotalTokens: in + len(rep.words)}
	if req.Generate != nil && !*req.Generate {
		x.warmup(done, req.Stream)
		return
	}
	if rep.truncated {
		done.Status = "incomplete"
		done.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	if req.Stream {
		if k := x.faults.failAfter; k >= 0 {
			done, rep = failedResponse(done, rep, k)
			x.usage.OutputTokens, x.usage.TotalTokens = done.Usage.OutputTokens, done.Usage.TotalTokens
		}
		x.stream(responseStream(done, rep))
		return
	}
	x.writeJSON(http.StatusOK, done)
}

// failedResponse is done and rep cut to their first k content chunks and
// failed there (HeaderFailAfter): status failed with a server_error, the
// usage the input and the output words sent.
func failedResponse(done responseObject, rep reply, k int) (responseObject, reply) {
	k = min(k, len(rep.chunks))
	rep.chunks = rep.chunks[:k]
	rep.text = strings.Join(rep.chunks, "")
	out := len(strings.Fields(rep.text))
	u := *done.Usage
	u.OutputTokens, u.TotalTokens = out, u.InputTokens+out
	u.OutputTokensDetails.ReasoningTokens = reasoningOf(done.Model, out)
	done.Usage, done.Status, done.IncompleteDetails = &u, "failed", nil
	done.Error = &responseError{Code: "server_error", Message: "The model failed to finish the response (X-Fake-Fail-After)."}
	done.Output = []outputItem{messageItem(done.Output[0].ID, "incomplete", rep.text)}
	return done, rep
}

// warmup answers a request with generate false: done without output, its
// usage the input alone; streamed, response.created, response.in_progress
// and response.completed.
func (x *exchange) warmup(done responseObject, stream bool) {
	u := *done.Usage
	u.OutputTokens, u.TotalTokens, u.OutputTokensDetails.ReasoningTokens = 0, u.InputTokens, 0
	done.Usage, done.Output = &u, []outputItem{}
	x.usage.OutputTokens, x.usage.TotalTokens = 0, u.TotalTokens
	if !stream {
		x.writeJSON(http.StatusOK, done)
		return
	}
	start := done
	start.Status, start.Usage = "in_progress", nil
	ev := func(seq int, typ string, r responseObject) sseEvent {
		return sseEvent{name: typ, data: map[string]any{"type": typ, "sequence_number": seq, "response": r}}
	}
	x.stream(streamPlan{head: []sseEvent{ev(0, "response.created", start), ev(1, "response.in_progress", start)},
		tail: []sseEvent{ev(2, "response.completed", done)}})
}

func messageItem(id, status, text string) outputItem {
	return outputItem{Type: "message", ID: id, Status: status, Role: "assistant", Content: []outputText{textPart(text)}}
}

func textPart(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}}
}

// responseStream is the event sequence of a streamed response, ending in
// response.completed (or response.incomplete) with the usage. Every event
// carries its sequence_number, and every response it repeats the service
// tier.
func responseStream(done responseObject, rep reply) streamPlan {
	seq := 0
	ev := func(typ string, fields map[string]any) sseEvent {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		return sseEvent{name: typ, data: fields}
	}
	itemID := done.Output[0].ID
	at := func(extra map[string]any) map[string]any {
		extra["item_id"], extra["output_index"], extra["content_index"] = itemID, 0, 0
		return extra
	}
	start := done
	start.Status, start.IncompleteDetails, start.Output, start.Usage = "in_progress", nil, []outputItem{}, nil
	pending := messageItem(itemID, "in_progress", "")
	pending.Content = []outputText{}
	var plan streamPlan
	plan.head = []sseEvent{
		ev("response.created", map[string]any{"response": start}),
		ev("response.in_progress", map[string]any{"response": start}),
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": pending}),
		ev("response.content_part.added", at(map[string]any{"part": textPart("")})),
	}
	for _, text := range rep.chunks {
		plan.chunks = append(plan.chunks, ev("response.output_text.delta", at(map[string]any{"delta": text})))
	}
	terminal := "response." + done.Status // completed, incomplete, failed
	plan.tail = []sseEvent{
		ev("response.output_text.done", at(map[string]any{"text": rep.text})),
		ev("response.content_part.done", at(map[string]any{"part": textPart(rep.text)})),
		ev("response.output_item.done", map[string]any{"output_index": 0, "item": done.Output[0]}),
		ev(terminal, map[string]any{"response": done}),
	}
	return plan
}
