package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// eagerSSE answers with a short SSE stream before reading the request body:
// the condition under which a stock httputil.ReverseProxy truncates streams
// (golang/go#40747). The body is drained only after the stream ends.
func eagerSSE() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range 5 {
			_, _ = fmt.Fprintf(w, "data: {\"chunk\":%d}\n\n", i)
			f.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		_, _ = io.Copy(io.Discard, r.Body)
	})
}

// TestNoStreamCutShortUnderLoad sends 5,000 streamed POSTs at about 500 a
// second; every one must end with its final event.
func TestNoStreamCutShortUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s load run; skipped with -short")
	}
	const total, perSecond = 5000, 500
	up := startUpstream(t, eagerSSE())
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("account.requests_per_minute", 6_000_000)
	cfg.set("account.max_in_flight", 2000)
	p := startProxy(t, cfg, nil)
	client := newClient(t, 256)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`

	var ok, cut atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	for range total {
		<-tick.C
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				panic(err)
			}
			res, err := client.Do(req)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(res.Body)
				_ = res.Body.Close()
			}
			if err == nil && res.StatusCode == 200 && bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
				ok.Add(1)
				return
			}
			cut.Add(1)
			mu.Lock()
			if len(failures) < 5 {
				failures = append(failures, fmt.Sprintf("err %v, %d bytes: %.80q", err, len(got), got))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if ok.Load() != total {
		t.Errorf("%d of %d streams complete, %d cut short; first failures: %v", ok.Load(), total, cut.Load(), failures)
	}
	mfs := scrape(t, p.AdminURL)
	if n := sum(mfs, "meterproxy_responses_cut_short_total", nil); n != 0 {
		t.Errorf("proxy counted %v streams cut short", n)
	}
}
