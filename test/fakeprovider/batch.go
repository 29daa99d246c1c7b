package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// batchWindow is how long a batch may take, as both providers state it.
const batchWindow = 24 * time.Hour

// HeaderBatchOutcome on a batch's creation sets how it ends when first
// retrieved: "completed" (the default; "ended" with every request
// succeeded for Anthropic), or, OpenAI's, "failed" (validation failed, no
// request ran) or "expired" (the window passed before any request ran).
const HeaderBatchOutcome = "X-Fake-Batch-Outcome"

type openAIBatchRequest struct {
	InputFileID      string          `json:"input_file_id"`
	Endpoint         string          `json:"endpoint"`
	CompletionWindow string          `json:"completion_window"`
	Metadata         json.RawMessage `json:"metadata"`
}

type openAIBatch struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *batchErrors      `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        int64             `json:"expires_at"`
	CompletedAt      *int64            `json:"completed_at"`
	RequestCounts    openAIBatchCounts `json:"request_counts"`
	Usage            *openAIBatchUsage `json:"usage"`
	Metadata         json.RawMessage   `json:"metadata"`
}

type batchErrors struct {
	Object string       `json:"object"`
	Data   []batchError `json:"data"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Line    *int   `json:"line"`
}

type openAIBatchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// openAIBatchUsage is the usage a batch object reports, as the Responses
// API's: the sum of its requests'.
type openAIBatchUsage struct {
	InputTokens         int           `json:"input_tokens"`
	InputTokensDetails  cachedTokens  `json:"input_tokens_details"`
	OutputTokens        int           `json:"output_tokens"`
	OutputTokensDetails reasoningPart `json:"output_tokens_details"`
	TotalTokens         int           `json:"total_tokens"`
}

type reasoningPart struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// openAIJob is a batch the fake keeps, with how it is to end.
type openAIJob struct {
	batch   openAIBatch
	outcome string
}

// openAIBatch answers POST /v1/batches with a batch just validating, on an
// input file uploaded before.
func (x *exchange) openAIBatch() {
	var req openAIBatchRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	if req.CompletionWindow == "" {
		req.CompletionWindow = "24h"
	}
	if len(req.Metadata) == 0 || req.Metadata[0] != '{' {
		req.Metadata = json.RawMessage("null")
	}
	j := x.p.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.files[req.InputFileID]; !ok {
		x.fail(http.StatusBadRequest, fmt.Sprintf("Invalid 'input_file_id': '%s'. No such file.", req.InputFileID))
		return
	}
	b := openAIBatch{
		ID:               j.unique(bodyID("batch_", x.body), func(id string) bool { _, ok := j.openAI[id]; return ok }),
		Object:           "batch",
		Endpoint:         req.Endpoint,
		InputFileID:      req.InputFileID,
		CompletionWindow: req.CompletionWindow,
		Status:           "validating",
		CreatedAt:        x.now.Unix(),
		ExpiresAt:        x.now.Add(batchWindow).Unix(),
		Metadata:         req.Metadata,
	}
	j.openAI[b.ID] = &openAIJob{batch: b, outcome: x.r.Header.Get(HeaderBatchOutcome)}
	x.writeJSON(http.StatusOK, b)
}

// openAIBatchGet answers GET /v1/batches/{id} (and POST …/cancel, when
// cancel): a batch still to run runs now and ends as its creation asked;
// a cancelled one is cancelling, then cancelled.
func (x *exchange) openAIBatchGet(id string, cancel bool) {
	j := x.p.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.openAI[id]
	if !ok {
		x.fail(http.StatusNotFound, "No batch found with id '"+id+"'.")
		return
	}
	b, now := &job.batch, x.now.Unix()
	switch {
	case cancel && (b.Status == "validating" || b.Status == "in_progress"):
		b.Status = "cancelling"
	case b.Status == "cancelling":
		b.Status = "cancelled"
	case b.Status == "validating":
		x.p.runOpenAI(job, now)
	}
	x.writeJSON(http.StatusOK, b)
}

// runOpenAI ends job as its creation asked. Called with the jobs locked.
func (p *Provider) runOpenAI(job *openAIJob, now int64) {
	b, lines := &job.batch, batchLines(p.jobs.files[job.batch.InputFileID])
	b.RequestCounts.Total = len(lines)
	switch job.outcome {
	case "failed":
		b.Status, b.RequestCounts.Total = "failed", 0
		b.Errors = &batchErrors{Object: "list", Data: []batchError{{Code: "invalid_request", Message: "Injected failure"}}}
		return
	case "expired":
		b.Status = "expired"
		b.RequestCounts.Failed = len(lines)
		return
	}
	var out bytes.Buffer
	u := openAIBatchUsage{}
	for i, line := range lines {
		var l struct {
			CustomID string          `json:"custom_id"`
			Body     json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(line, &l)
		var req chatRequest
		_ = json.Unmarshal(l.Body, &req)
		limit := req.MaxCompletionTokens
		if limit == 0 {
			limit = req.MaxTokens
		}
		rep := newReply(len(req.Messages), limit, p.cfg.StreamChunks)
		in := promptTokens(l.Body)
		finish := "stop"
		c := chatCompletion{ID: fmt.Sprintf("chatcmpl-%s-%d", b.ID, i), Object: "chat.completion", Created: now, Model: modelOr(req.Model),
			ServiceTier: "default", SystemFingerprint: "fp_fake",
			Choices: []chatChoice{{Message: &chatMessage{Role: "assistant", Content: &rep.text}, FinishReason: &finish}},
			Usage:   &chatUsage{PromptTokens: in, CompletionTokens: len(rep.words), TotalTokens: in + len(rep.words)}}
		row, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("batch_req_%d", i), "custom_id": l.CustomID,
			"response": map[string]any{"status_code": 200, "request_id": fmt.Sprintf("req_%d", i), "body": c}, "error": nil})
		out.Write(append(row, '\n'))
		u.InputTokens += in
		u.OutputTokens += len(rep.words)
	}
	u.TotalTokens = u.InputTokens + u.OutputTokens
	id := p.jobs.unique(bodyID("file-", out.Bytes()), func(id string) bool { _, ok := p.jobs.files[id]; return ok })
	p.jobs.files[id] = out.Bytes()
	b.Status, b.OutputFileID, b.CompletedAt, b.InProgressAt = "completed", &id, &now, &now
	b.RequestCounts.Completed, b.Usage = len(lines), &u
}

// batchLines are the non-empty lines of a JSONL file.
func batchLines(content []byte) [][]byte {
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(nil, maxBodyBytes)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			lines = append(lines, bytes.Clone(line))
		}
	}
	return lines
}
