package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

type anthropicBatchRequest struct {
	Requests []struct {
		CustomID string          `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	} `json:"requests"`
}

type anthropicBatch struct {
	ID                string               `json:"id"`
	Type              string               `json:"type"`
	ProcessingStatus  string               `json:"processing_status"`
	RequestCounts     anthropicBatchCounts `json:"request_counts"`
	EndedAt           *string              `json:"ended_at"`
	CreatedAt         string               `json:"created_at"`
	ExpiresAt         string               `json:"expires_at"`
	CancelInitiatedAt *string              `json:"cancel_initiated_at"`
	ResultsURL        *string              `json:"results_url"`
}

type anthropicBatchCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

// anthropicJob is a message batch the fake keeps, with its requests and,
// once ended, its results (JSONL).
type anthropicJob struct {
	batch   anthropicBatch
	req     anthropicBatchRequest
	results []byte
}

// anthropicBatch answers POST /v1/messages/batches with a batch in
// progress, every request still processing.
func (x *exchange) anthropicBatch() {
	var req anthropicBatchRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	j := x.p.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	b := anthropicBatch{
		ID:               j.unique(bodyID("msgbatch_", x.body), func(id string) bool { _, ok := j.claude[id]; return ok }),
		Type:             "message_batch",
		ProcessingStatus: "in_progress",
		RequestCounts:    anthropicBatchCounts{Processing: len(req.Requests)},
		CreatedAt:        x.now.UTC().Format(time.RFC3339),
		ExpiresAt:        x.now.Add(batchWindow).UTC().Format(time.RFC3339),
	}
	j.claude[b.ID] = &anthropicJob{batch: b, req: req}
	x.writeJSON(http.StatusOK, b)
}

// anthropicBatchGet answers GET /v1/messages/batches/{id} (and POST
// …/cancel, when cancel): a batch in progress ends now, every request
// succeeded — or, cancelled, every request canceled.
func (x *exchange) anthropicBatchGet(id string, cancel bool) {
	j := x.p.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.claude[id]
	if !ok {
		x.fail(http.StatusNotFound, "Batch not found: "+id)
		return
	}
	b, at := &job.batch, x.now.UTC().Format(time.RFC3339)
	switch {
	case cancel && b.ProcessingStatus == "in_progress":
		b.ProcessingStatus, b.CancelInitiatedAt = "canceling", &at
	case b.ProcessingStatus == "canceling":
		b.RequestCounts = anthropicBatchCounts{Canceled: len(job.req.Requests)}
		b.ProcessingStatus, b.EndedAt = "ended", &at
	case b.ProcessingStatus == "in_progress":
		x.p.runAnthropic(job, at, x.r.Host)
	}
	x.writeJSON(http.StatusOK, b)
}

// runAnthropic answers every request of job. Called with the jobs locked.
func (p *Provider) runAnthropic(job *anthropicJob, at, host string) {
	var out bytes.Buffer
	for i, r := range job.req.Requests {
		var req messagesRequest
		_ = json.Unmarshal(r.Params, &req)
		rep := newReply(len(req.Messages), req.MaxTokens, p.cfg.StreamChunks)
		stop := "end_turn"
		msg := anthropicMessage{ID: fmt.Sprintf("msg_%s_%d", job.batch.ID, i), Type: "message", Role: "assistant", Model: modelOr(req.Model),
			Content: []anthropicText{{Type: "text", Text: rep.text}}, StopReason: &stop,
			Usage: anthropicUsage{InputTokens: promptTokens(r.Params), OutputTokens: len(rep.words), ServiceTier: "batch"}}
		row, _ := json.Marshal(map[string]any{"custom_id": r.CustomID, "result": map[string]any{"type": "succeeded", "message": msg}})
		out.Write(append(row, '\n'))
	}
	b := &job.batch
	url := "http://" + host + "/v1/messages/batches/" + b.ID + "/results"
	b.RequestCounts = anthropicBatchCounts{Succeeded: len(job.req.Requests)}
	b.ProcessingStatus, b.EndedAt, b.ResultsURL, job.results = "ended", &at, &url, out.Bytes()
}

// anthropicResults answers GET /v1/messages/batches/{id}/results: JSONL,
// one line a request, once the batch ended.
func (x *exchange) anthropicResults(id string) {
	j := x.p.jobs
	j.mu.Lock()
	job, ok := j.claude[id]
	var results []byte
	if ok {
		results = job.results
	}
	j.mu.Unlock()
	if !ok || results == nil {
		x.fail(http.StatusNotFound, "No results for batch: "+id)
		return
	}
	x.w.Header().Set("Content-Type", "application/binary")
	x.status = http.StatusOK
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(results)
}
