package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// zeros is an endless reader of 'z'.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'z'
	}
	return len(p), nil
}

// countingUpstream reads each body to its end and answers how many bytes
// it read; a request to /v1/files/early is answered 401 before a byte of
// its body is read, as an upstream refusing an upload does.
func countingUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/early") {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]int64{"bytes": n})
	})
}

// TestUploadsStreamThrough: a file upload larger than the memory budget
// goes through whole, and never touches the budget nor the windows.
func TestUploadsStreamThrough(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: countingUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Server.MaxBodyBytes, c.Server.MaxBodyMemoryBytes = 64<<10, 64<<10
	}})
	const size = 64 << 20 // a thousand times the memory budget
	for _, chunked := range []bool{false, true} {
		req := newRequest(t, http.MethodPost, p.URL+"/v1/files", "")
		req.Body = io.NopCloser(io.LimitReader(zeros{}, size))
		if !chunked {
			req.ContentLength = size
		}
		status, _, body := do(t, req)
		if status != 200 || !strings.Contains(string(body), `"bytes":`+strconv.Itoa(size)) {
			t.Errorf("chunked %v: %d %s, want the upstream to have read all %d bytes", chunked, status, body, size)
		}
	}
	if got := p.handler.bodies.budget.inUse(); got != 0 {
		t.Errorf("uploads left %d bytes charged", got)
	}
}

// TestUploadLimits: over server.max_upload_bytes is a 413, declared or
// discovered while streaming; a stalled upload is cut at
// server.body_read_timeout.
func TestUploadLimits(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: countingUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Server.MaxUploadBytes, c.Server.BodyReadTimeout = 1<<20, 300*time.Millisecond
	}})
	req := newRequest(t, http.MethodPost, p.URL+"/v1/uploads", "")
	req.Body, req.ContentLength = io.NopCloser(io.LimitReader(zeros{}, 2<<20)), 2<<20
	if status, _, _ := do(t, req); status != http.StatusRequestEntityTooLarge {
		t.Errorf("declared over the limit: %d, want 413", status)
	}
	req = newRequest(t, http.MethodPost, p.URL+"/v1/files", "")
	req.Body = io.NopCloser(io.LimitReader(zeros{}, 2<<20)) // chunked
	if status, _, _ := do(t, req); status != http.StatusRequestEntityTooLarge {
		t.Errorf("streamed over the limit: %d, want 413", status)
	}
	c := openBodyTo(t, p.URL, "/v1/files", 1000, "abc")
	if status := readStatus(t, c); status != http.StatusRequestTimeout {
		t.Errorf("a stalled upload: %d, want 408", status)
	}
}

// TestUploadEarlyAnswer: golang/go#40747. An upstream that answers before
// it has read the upload: the caller gets that answer, not a 502.
func TestUploadEarlyAnswer(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: countingUpstream()})
	req := newRequest(t, http.MethodPost, p.URL+"/v1/files/early", "")
	req.Body, req.ContentLength = io.NopCloser(io.LimitReader(zeros{}, 8<<20)), 8<<20
	status, _, body := do(t, req)
	if status != http.StatusUnauthorized || !strings.Contains(string(body), "invalid_api_key") {
		t.Errorf("%d %s, want the upstream's 401", status, body)
	}
}
