package fakeprovider

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"sync"
)

// batchJobs are the files uploaded and the batches created, as a
// provider keeps them: an input file must be uploaded before a batch
// names it, and a batch runs when it is first retrieved (batch.go).
type batchJobs struct {
	mu      sync.Mutex
	files   map[string][]byte
	openAI  map[string]*openAIJob
	claude  map[string]*anthropicJob
	counter int
}

func newBatchJobs() *batchJobs {
	return &batchJobs{files: map[string][]byte{}, openAI: map[string]*openAIJob{}, claude: map[string]*anthropicJob{}}
}

// unique is id, or id with a counter when it is taken already (the same
// body sent twice makes two batches).
func (j *batchJobs) unique(id string, taken func(string) bool) string {
	base := id
	for taken(id) {
		j.counter++
		id = fmt.Sprintf("%s%d", base, j.counter)
	}
	return id
}

// openAIFile is OpenAI's file object.
type openAIFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int    `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
}

// uploadFile answers POST /v1/files: a multipart form with a file part
// and a purpose field, kept by its new id.
func (x *exchange) uploadFile() {
	media, params, err := mime.ParseMediaType(x.r.Header.Get("Content-Type"))
	if err != nil || media != "multipart/form-data" {
		x.fail(http.StatusBadRequest, "The request must be multipart/form-data")
		return
	}
	form, err := multipart.NewReader(bytes.NewReader(x.body), params["boundary"]).ReadForm(maxBodyBytes)
	if err != nil {
		x.fail(http.StatusBadRequest, "Could not parse multipart form: "+err.Error())
		return
	}
	defer func() { _ = form.RemoveAll() }()
	purpose, files := form.Value["purpose"], form.File["file"]
	if len(purpose) != 1 || len(files) != 1 {
		x.fail(http.StatusBadRequest, "'file' and 'purpose' are required")
		return
	}
	f, err := files[0].Open()
	if err != nil {
		x.fail(http.StatusBadRequest, err.Error())
		return
	}
	content, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		x.fail(http.StatusBadRequest, err.Error())
		return
	}
	x.writeJSON(http.StatusOK, x.p.keepFile(bodyID("file-", content), content, files[0].Filename, purpose[0], x.now.Unix()))
}

// keepFile keeps content as a file and returns its object.
func (p *Provider) keepFile(id string, content []byte, name, purpose string, at int64) openAIFile {
	j := p.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	id = j.unique(id, func(id string) bool { _, ok := j.files[id]; return ok })
	j.files[id] = content
	return openAIFile{ID: id, Object: "file", Bytes: len(content), CreatedAt: at, Filename: name, Purpose: purpose, Status: "processed"}
}

// fileContent answers GET /v1/files/{id}/content.
func (x *exchange) fileContent(id string) {
	x.p.jobs.mu.Lock()
	content, ok := x.p.jobs.files[id]
	x.p.jobs.mu.Unlock()
	if !ok {
		x.fail(http.StatusNotFound, "No such File object: "+id)
		return
	}
	x.w.Header().Set("Content-Type", "application/octet-stream")
	x.status = http.StatusOK
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(content)
}
