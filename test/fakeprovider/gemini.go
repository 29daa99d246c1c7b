package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Google's Gemini API as the fake speaks it (ai.google.dev/api): POST
// /v1beta/models/{model}:generateContent answers one
// GenerateContentResponse; :streamGenerateContent streams them, as
// server-sent events with ?alt=sse and as one JSON array without it,
// each carrying usageMetadata, cumulative, the last one whole with the
// candidate's finishReason; :countTokens answers totalTokens;
// :embedContent and :batchEmbedContents answer vectors and no usage.
// The same under /v1/models/…. The usage: promptTokenCount a quarter of
// the body's bytes (or HeaderInputTokens'), cachedContentTokenCount
// HeaderCachedTokens' part of it, candidatesTokenCount one per word of
// the reply, thoughtsTokenCount the request's
// generationConfig.thinkingConfig.thinkingBudget (at most
// maxFakeThoughts; none without one). Gemini's OpenAI-compatible
// endpoint (/v1beta/openai/…) is OpenAI's API (openai.go) at Google, its
// errors Google's wrapped in a JSON array (geminierrors.go). Neither
// sends rate-limit headers.

// maxFakeThoughts bounds the thinking the fake reports.
const maxFakeThoughts = 1024

// geminiRequest is the part of a generateContent request the fake reads.
type geminiRequest struct {
	Contents         []json.RawMessage `json:"contents"`
	GenerationConfig struct {
		MaxOutputTokens int `json:"maxOutputTokens"`
		ThinkingConfig  struct {
			ThinkingBudget int `json:"thinkingBudget"`
		} `json:"thinkingConfig"`
	} `json:"generationConfig"`
	Requests []json.RawMessage `json:"requests"` // batchEmbedContents
}

type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata geminiUsage       `json:"usageMetadata"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

type geminiContent struct {
	Parts []geminiPart `json:"parts"`
	Role  string       `json:"role"`
}

type geminiPart struct {
	Text string `json:"text"`
}

// geminiUsage has the field names of Gemini's UsageMetadata.
type geminiUsage struct {
	PromptTokenCount        int `json:"promptTokenCount"`
	CandidatesTokenCount    int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount         int `json:"totalTokenCount"`
	CachedContentTokenCount int `json:"cachedContentTokenCount,omitempty"`
	ThoughtsTokenCount      int `json:"thoughtsTokenCount,omitempty"`
}

// geminiPath splits a Gemini API path into its model and method:
// /v1beta/models/{model}:{method} or /v1/models/{model}:{method}.
func geminiPath(path string) (model, method string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/v1beta/models/")
	if !ok {
		if rest, ok = strings.CutPrefix(path, "/v1/models/"); !ok {
			return "", "", false
		}
	}
	model, method, ok = strings.Cut(rest, ":")
	return model, method, ok && model != "" && !strings.Contains(model, "/")
}

// geminiRoute answers a Gemini API path by its method.
func (x *exchange) geminiRoute() {
	model, method, ok := geminiPath(x.r.URL.Path)
	if !ok {
		x.fail(http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", x.r.Method, x.r.URL.Path))
		return
	}
	if x.r.Method != http.MethodPost {
		x.w.Header().Set("Allow", http.MethodPost)
		x.fail(http.StatusMethodNotAllowed, fmt.Sprintf("Method %s not allowed on %s", x.r.Method, x.r.URL.Path))
		return
	}
	var req geminiRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.fail(http.StatusBadRequest, "Invalid JSON payload received. "+err.Error())
		return
	}
	switch method {
	case "generateContent":
		x.generateContent(model, req, false)
	case "streamGenerateContent":
		x.generateContent(model, req, true)
	case "countTokens":
		x.writeJSON(http.StatusOK, map[string]int{"totalTokens": promptTokens(x.body)})
	case "embedContent":
		x.writeJSON(http.StatusOK, map[string]any{"embedding": map[string]any{"values": vector(x.body, defaultEmbeddingDims)}})
	case "batchEmbedContents":
		out := make([]map[string]any, len(req.Requests))
		for i, r := range req.Requests {
			out[i] = map[string]any{"values": vector(r, defaultEmbeddingDims)}
		}
		x.writeJSON(http.StatusOK, map[string]any{"embeddings": out})
	default:
		x.fail(http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", x.r.Method, x.r.URL.Path))
	}
}

// generateContent answers generateContent, or streamGenerateContent
// (stream): the reply's words, and usage as the package documents it.
func (x *exchange) generateContent(model string, req geminiRequest, stream bool) {
	in, cached, ok := x.promptUsage()
	if !ok {
		return
	}
	rep := newReply(len(req.Contents), req.GenerationConfig.MaxOutputTokens, x.p.cfg.StreamChunks)
	thoughts := min(max(req.GenerationConfig.ThinkingConfig.ThinkingBudget, 0), maxFakeThoughts)
	out := len(rep.words)
	x.usage = &Usage{InputTokens: in, CachedTokens: cached, OutputTokens: out + thoughts, ReasoningTokens: thoughts,
		TotalTokens: in + out + thoughts}
	finish := "STOP"
	if rep.truncated {
		finish = "MAX_TOKENS"
	}
	whole := geminiUsage{PromptTokenCount: in, CandidatesTokenCount: out, TotalTokenCount: in + out + thoughts,
		CachedContentTokenCount: cached, ThoughtsTokenCount: thoughts}
	resp := func(text, finish string, u geminiUsage) geminiResponse {
		return geminiResponse{Candidates: []geminiCandidate{{Content: geminiContent{Parts: []geminiPart{{Text: text}}, Role: "model"},
			FinishReason: finish}}, UsageMetadata: u, ModelVersion: model, ResponseID: bodyID("", x.body)}
	}
	if !stream {
		x.writeJSON(http.StatusOK, resp(rep.text, finish, whole))
		return
	}
	var plan streamPlan
	words := 0
	for _, text := range rep.chunks {
		words += len(strings.Fields(text))
		u := geminiUsage{PromptTokenCount: in, CandidatesTokenCount: words, TotalTokenCount: in + words + thoughts,
			CachedContentTokenCount: cached, ThoughtsTokenCount: thoughts}
		plan.chunks = append(plan.chunks, sseEvent{data: resp(text, "", u)})
	}
	plan.tail = []sseEvent{{data: resp("", finish, whole)}}
	if x.r.URL.Query().Get("alt") == "sse" {
		x.stream(plan)
		return
	}
	x.streamArray(plan)
}

// streamArray answers 200 with plan as streamGenerateContent sends it
// without alt=sse: one JSON array, an element written and flushed as
// each event would be.
func (x *exchange) streamArray(plan streamPlan) {
	x.status = http.StatusOK
	h := x.w.Header()
	h.Set("Content-Type", "application/json; charset=UTF-8")
	x.w.WriteHeader(http.StatusOK)
	s := &arraySink{sseWriter: sseWriter{ctx: x.r.Context(), w: x.w, rc: http.NewResponseController(x.w)}}
	x.play(plan, s)
	if x.outcome == streamCompleted {
		_, _ = io.WriteString(x.w, "\n]")
		_ = s.rc.Flush()
	}
}

// arraySink writes events as the elements of a JSON array, laid out as
// Google lays it out: "[{…}", then "\n,\r\n{…}" for each next one; the
// caller closes it.
type arraySink struct {
	sseWriter
	started bool
}

func (s *arraySink) send(e sseEvent) error {
	b, err := json.Marshal(e.data)
	if err != nil {
		return fmt.Errorf("fakeprovider: encode element: %w", err)
	}
	sep := "\n,\r\n"
	if !s.started {
		sep, s.started = "[", true
	}
	if _, err = io.WriteString(s.w, sep+string(b)); err == nil {
		err = s.rc.Flush()
	}
	if err == nil {
		err = s.ctx.Err()
	}
	return err
}
