package fakeprovider

import "net/http"

// The answers that generate nothing: token counts and the model list.

// countTokens answers POST /v1/messages/count_tokens as Anthropic does:
// {"input_tokens": n}.
func (x *exchange) countTokens() {
	x.writeJSON(http.StatusOK, map[string]int{"input_tokens": promptTokens(x.body)})
}

// inputTokens answers POST /v1/responses/input_tokens as OpenAI does.
func (x *exchange) inputTokens() {
	x.writeJSON(http.StatusOK, map[string]any{"object": "response.input_tokens", "input_tokens": promptTokens(x.body)})
}

// modelEntry is one model of GET /v1/models.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models answers GET /v1/models: the default model and those
// Config.Models limits.
func (x *exchange) models() {
	list := []modelEntry{{ID: defaultModel, Object: "model", OwnedBy: "fakeprovider"}}
	for _, m := range x.p.cfg.Models {
		list = append(list, modelEntry{ID: m.Name, Object: "model", OwnedBy: "fakeprovider"})
	}
	x.writeJSON(http.StatusOK, map[string]any{"object": "list", "data": list})
}
