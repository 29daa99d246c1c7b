package fakeprovider_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// uploadFile uploads content as a file of purpose to srv's /v1/files, as
// the SDKs do (multipart), and returns its id.
func uploadFile(t *testing.T, srv *httptest.Server, purpose, content string) string {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.WriteField("purpose", purpose)
	fw, _ := w.CreateFormFile("file", "batch.jsonl")
	_, _ = fw.Write([]byte(content))
	_ = w.Close()
	status, _, body := send(t, srv, http.MethodPost, "/v1/files", b.String(), map[string]string{"Content-Type": w.FormDataContentType()})
	f := decode[struct {
		ID, Object, Purpose string
		Bytes               int
	}](t, body)
	if status != http.StatusOK || f.Object != "file" || f.Purpose != purpose || f.Bytes != len(content) {
		t.Fatalf("upload: %d %s", status, body)
	}
	return f.ID
}

// batchLine is one request of a batch input file.
const batchLine = `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}}`

type batchObject struct {
	ID, Status    string
	OutputFileID  *string                                `json:"output_file_id"`
	RequestCounts struct{ Total, Completed, Failed int } `json:"request_counts"`
	Usage         *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
}

// TestOpenAIBatchLifecycle: a batch needs its input file uploaded first;
// it runs when first retrieved and ends as its creation asked: completed
// with its requests' usage summed and an output file of their answers,
// failed or expired with no usage, or cancelled through cancelling.
func TestOpenAIBatchLifecycle(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	if status, _, _ := post(t, srv, "/v1/batches", `{"input_file_id":"file-nope"}`); status != http.StatusBadRequest {
		t.Errorf("a batch on a file never uploaded: %d, want 400", status)
	}
	file := uploadFile(t, srv, "batch", strings.ReplaceAll(batchLine, "%d", "1")+"\n"+strings.ReplaceAll(batchLine, "%d", "2")+"\n")
	create := func(outcome string) string {
		_, _, b := send(t, srv, http.MethodPost, "/v1/batches", `{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions"}`,
			map[string]string{fakeprovider.HeaderBatchOutcome: outcome})
		return decode[batchObject](t, b).ID
	}
	get := func(id, suffix string) batchObject {
		method := http.MethodGet
		if suffix != "" {
			method = http.MethodPost
		}
		_, _, b := send(t, srv, method, "/v1/batches/"+id+suffix, "", nil)
		return decode[batchObject](t, b)
	}
	tests := []struct {
		outcome, cancel, want string
		completed             int
		usage                 bool
	}{
		{"", "", "completed", 2, true},
		{"failed", "", "failed", 0, false},
		{"expired", "", "expired", 0, false},
		{"", "/cancel", "cancelled", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			id := create(tt.outcome)
			if tt.cancel != "" {
				if got := get(id, tt.cancel); got.Status != "cancelling" {
					t.Errorf("cancel: %s, want cancelling", got.Status)
				}
			}
			got := get(id, "")
			if got.ID != id || got.Status != tt.want || got.RequestCounts.Completed != tt.completed || (got.Usage != nil) != tt.usage {
				t.Fatalf("batch %+v, want %s with %d completed, usage %v", got, tt.want, tt.completed, tt.usage)
			}
			if !tt.usage {
				return
			}
			// The output file: one answer a line, whose usage sums to the batch's.
			_, _, out := send(t, srv, http.MethodGet, "/v1/files/"+*got.OutputFileID+"/content", "", nil)
			in, outTokens := 0, 0
			for line := range strings.Lines(string(out)) {
				var l struct {
					Response struct {
						StatusCode int `json:"status_code"`
						Body       struct {
							Usage struct {
								PromptTokens     int `json:"prompt_tokens"`
								CompletionTokens int `json:"completion_tokens"`
							} `json:"usage"`
						} `json:"body"`
					} `json:"response"`
				}
				if err := json.Unmarshal([]byte(line), &l); err != nil || l.Response.StatusCode != 200 {
					t.Fatalf("output line %q: %v", line, err)
				}
				in += l.Response.Body.Usage.PromptTokens
				outTokens += l.Response.Body.Usage.CompletionTokens
			}
			if in == 0 || in != got.Usage.InputTokens || outTokens != got.Usage.OutputTokens || got.Usage.TotalTokens != in+outTokens {
				t.Errorf("usage %+v, the output file's lines sum to %d in, %d out", got.Usage, in, outTokens)
			}
		})
	}
}

// TestAnthropicBatchLifecycle: a message batch ends when first
// retrieved, every request succeeded, its results (JSONL) carrying each
// message and its usage; a cancelled one ends with every request
// canceled.
func TestAnthropicBatchLifecycle(t *testing.T) {
	_, srv := newServer(t, fakeprovider.Config{})
	body := `{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}}]}`
	type batch struct {
		ID               string                            `json:"id"`
		ProcessingStatus string                            `json:"processing_status"`
		RequestCounts    struct{ Succeeded, Canceled int } `json:"request_counts"`
		ResultsURL       *string                           `json:"results_url"`
	}
	_, _, b := post(t, srv, "/v1/messages/batches", body)
	id := decode[batch](t, b).ID
	_, _, b = send(t, srv, http.MethodGet, "/v1/messages/batches/"+id, "", nil)
	if got := decode[batch](t, b); got.ProcessingStatus != "ended" || got.RequestCounts.Succeeded != 1 || got.ResultsURL == nil {
		t.Fatalf("batch %s", b)
	}
	_, _, res := send(t, srv, http.MethodGet, "/v1/messages/batches/"+id+"/results", "", nil)
	var r struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string
			Message struct {
				Usage struct {
					OutputTokens int `json:"output_tokens"`
				}
			}
		}
	}
	if err := json.Unmarshal(bytes.TrimSpace(res), &r); err != nil || r.CustomID != "a" || r.Result.Type != "succeeded" || r.Result.Message.Usage.OutputTokens != 4 {
		t.Errorf("results %s: %v", res, err)
	}
	_, _, b = post(t, srv, "/v1/messages/batches", body)
	id = decode[batch](t, b).ID
	send(t, srv, http.MethodPost, "/v1/messages/batches/"+id+"/cancel", "", nil)
	_, _, b = send(t, srv, http.MethodGet, "/v1/messages/batches/"+id, "", nil)
	if got := decode[batch](t, b); got.ProcessingStatus != "ended" || got.RequestCounts.Canceled != 1 {
		t.Errorf("cancelled batch %s", b)
	}
}
