package fakeprovider

import (
	"encoding/json"
	"net/http"
	"time"
)

// batchWindow is how long a batch may take, as both providers state it.
const batchWindow = 24 * time.Hour

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
	Errors           *struct{}         `json:"errors"`
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
	Metadata         json.RawMessage   `json:"metadata"`
}

type openAIBatchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// openAIBatch answers POST /v1/batches with a batch just validating.
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
	x.writeJSON(http.StatusOK, openAIBatch{
		ID:               bodyID("batch_", x.body),
		Object:           "batch",
		Endpoint:         req.Endpoint,
		InputFileID:      req.InputFileID,
		CompletionWindow: req.CompletionWindow,
		Status:           "validating",
		CreatedAt:        x.now.Unix(),
		ExpiresAt:        x.now.Add(batchWindow).Unix(),
		Metadata:         req.Metadata,
	})
}

type anthropicBatchRequest struct {
	Requests []json.RawMessage `json:"requests"`
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

// anthropicBatch answers POST /v1/messages/batches with a batch in
// progress, every request still processing.
func (x *exchange) anthropicBatch() {
	var req anthropicBatchRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	x.writeJSON(http.StatusOK, anthropicBatch{
		ID:               bodyID("msgbatch_", x.body),
		Type:             "message_batch",
		ProcessingStatus: "in_progress",
		RequestCounts:    anthropicBatchCounts{Processing: len(req.Requests)},
		CreatedAt:        x.now.UTC().Format(time.RFC3339),
		ExpiresAt:        x.now.Add(batchWindow).UTC().Format(time.RFC3339),
	})
}
