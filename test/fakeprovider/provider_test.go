package fakeprovider_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

func TestMalformedJSON(t *testing.T) {
	paths := []string{"/v1/chat/completions", "/v1/embeddings", "/v1/responses", "/v1/messages", "/v1/batches", "/v1/messages/batches"}
	bodies := map[string]string{
		"truncated": `{"model":`,
		"not json":  `hello`,
		"array":     `[]`,
		"null":      `null`,
		"empty":     ``,
	}
	for _, path := range paths {
		for name, body := range bodies {
			t.Run(path+"/"+name, func(t *testing.T) {
				_, srv := newServer(t, fakeprovider.Config{})
				status, _, b := post(t, srv, path, body)
				if status != http.StatusBadRequest {
					t.Fatalf("status %d: %s", status, b)
				}
				checkErrorBody(t, path, b, "invalid_request_error", "")
				if !bytes.Contains(b, []byte(`"code":null`)) && !strings.HasPrefix(path, "/v1/messages") {
					t.Errorf("OpenAI error without \"code\":null: %s", b)
				}
			})
		}
	}
}

func TestUnknownRoutes(t *testing.T) {
	tests := []struct {
		name, method, path string
		want               int
		wantType           string
	}{
		{"unknown OpenAI path", http.MethodPost, "/v1/completions/nope", 404, "invalid_request_error"},
		{"unknown Anthropic path", http.MethodPost, "/v1/messages/nope", 404, "not_found_error"},
		{"root", http.MethodGet, "/", 404, "invalid_request_error"},
		{"GET on chat", http.MethodGet, "/v1/chat/completions", 405, "invalid_request_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			status, _, b := send(t, srv, tc.method, tc.path, "", nil)
			if status != tc.want {
				t.Fatalf("status %d, want %d: %s", status, tc.want, b)
			}
			checkErrorBody(t, tc.path, b, tc.wantType, "")
		})
	}
}

func TestSameRequestSameBytes(t *testing.T) {
	tests := []struct{ name, path, body, other string }{
		{"chat", "/v1/chat/completions", twoMessages + `}`, chatBodyMin},
		{"chat stream", "/v1/chat/completions", twoMessages + `,"stream":true,"stream_options":{"include_usage":true}}`, twoMessages + `,"stream":true}`},
		{"embeddings", "/v1/embeddings", `{"input":["a","b"]}`, `{"input":["a","c"]}`},
		{"responses", "/v1/responses", `{"input":"hi"}`, `{"input":"ho"}`},
		{"responses stream", "/v1/responses", `{"input":"hi","stream":true}`, `{"input":"ho","stream":true}`},
		{"messages", "/v1/messages", claudeTwo + `}`, claudeTwo + `,"metadata":{}}`},
		{"messages stream", "/v1/messages", claudeTwo + `,"stream":true}`, claudeTwo + `,"stream":true,"x":1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{})
			_, _, first := post(t, srv, tc.path, tc.body)
			_, _, again := post(t, srv, tc.path, tc.body)
			_, _, other := post(t, srv, tc.path, tc.other)
			if !bytes.Equal(first, again) {
				t.Errorf("same request, different bytes:\n%s\n%s", first, again)
			}
			if bytes.Equal(first, other) {
				t.Errorf("different requests, same bytes: %s", first)
			}
		})
	}
}

func TestRequestLog(t *testing.T) {
	for _, record := range []bool{false, true} {
		t.Run(fmt.Sprintf("RecordBodies=%v", record), func(t *testing.T) {
			clock := newClock()
			p, srv := newServer(t, fakeprovider.Config{RecordBodies: record, Now: clock.Now})
			send(t, srv, http.MethodPost, "/v1/chat/completions", chatBodyMin, map[string]string{"X-Caller": "a"})
			send(t, srv, http.MethodPost, "/v1/messages", "{", nil)
			log := p.Requests()
			if len(log) != 2 {
				t.Fatalf("log has %d entries", len(log))
			}
			first := log[0]
			if first.Method != http.MethodPost || first.Path != "/v1/chat/completions" || first.Status != 200 ||
				!first.Arrived.Equal(t0) || first.Header.Get("X-Caller") != "a" {
				t.Errorf("first = %+v", first)
			}
			if got := string(first.Body); record && got != chatBodyMin || !record && first.Body != nil {
				t.Errorf("body = %q (RecordBodies %v)", got, record)
			}
			if log[1].Status != http.StatusBadRequest {
				t.Errorf("second status = %d", log[1].Status)
			}
			log[0].Header.Set("X-Caller", "changed") // a copy: the provider's log is unchanged
			if p.Requests()[0].Header.Get("X-Caller") != "a" {
				t.Error("Requests returned the provider's own header map")
			}
		})
	}
}

func TestNoLog(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{NoLog: true})
	post(t, srv, "/v1/chat/completions", chatBodyMin)
	if got := p.Stats(); got.Requests != 1 || got.Served != 1 || len(p.Requests()) != 0 {
		t.Errorf("with NoLog: stats %+v, log %d entries; want the request counted and no log", got, len(p.Requests()))
	}
}

func TestStatsAndReset(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{RPM: 1})
	post(t, srv, "/v1/chat/completions", chatBodyMin)                       // served
	post(t, srv, "/v1/chat/completions", chatBodyMin)                       // 429
	post(t, srv, "/v1/messages/batches", `{"requests":[]}`)                 // served: batches are not limited
	send(t, srv, http.MethodGet, "/v1/models", "", nil)                     // 429: limited before routing
	post(t, srv, "/v1/messages/batches", `{"requests":[{"custom_id":"a"}]`) // 400
	want := fakeprovider.Stats{Requests: 5, Served: 2, RateLimited: 2, Failed: 1}
	got := p.Stats()
	if got.Requests != want.Requests || got.Served != want.Served || got.RateLimited != want.RateLimited ||
		got.Failed != want.Failed || got.ByPath["/v1/chat/completions"] != 2 || got.ByPath["/v1/models"] != 1 {
		t.Errorf("stats = %+v", got)
	}
	p.Reset()
	if got := p.Stats(); got.Requests != 0 || len(got.ByPath) != 0 || len(p.Requests()) != 0 || len(p.Arrivals()) != 0 {
		t.Errorf("after Reset: stats %+v", got)
	}
	if status, _, _ := post(t, srv, "/v1/chat/completions", chatBodyMin); status != http.StatusOK {
		t.Errorf("after Reset the bucket is full, got %d", status)
	}
}

func TestConcurrentRequests(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{RPM: 40, StreamChunks: 3})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { // no t.Fatal off the test goroutine
			body := fmt.Sprintf(`{"messages":[],"stream":%v,"n":%d}`, i%2 == 0, i)
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			errs <- errors.Join(err, resp.Body.Close())
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	st := p.Stats()
	if st.Requests != n || st.Served != 40 || st.RateLimited != n-40 || st.Served+st.RateLimited != n {
		t.Errorf("stats = %+v", st)
	}
	if st.StreamsCompleted+st.StreamsCut > st.Served {
		t.Errorf("more streams than served requests: %+v", st)
	}
}
