package fakeprovider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

func TestFaultStatus(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		hdr       map[string]string
		want      int
		wantType  string
		wantCode  string // OpenAI only; "" means null
		wantRetry string // retry-after; "" means absent
	}{
		{"500", "/v1/chat/completions", map[string]string{"X-Fake-Status": "500"}, 500, "server_error", "", ""},
		{"503", "/v1/responses", map[string]string{"X-Fake-Status": "503"}, 503, "server_error", "server_is_overloaded", ""},
		{"429 with retry-after", "/v1/chat/completions",
			map[string]string{"X-Fake-Status": "429", "X-Fake-Retry-After": "2"}, 429, "rate_limit_error", "rate_limit_exceeded", "2"},
		{"429 without retry-after", "/v1/chat/completions", map[string]string{"X-Fake-Status": "429"}, 429, "rate_limit_error", "rate_limit_exceeded", ""},
		{"anthropic 529", "/v1/messages", map[string]string{"X-Fake-Status": "529"}, 529, "overloaded_error", "", ""},
		{"anthropic 429", "/v1/messages",
			map[string]string{"X-Fake-Status": "429", "X-Fake-Retry-After": "0.5"}, 429, "rate_limit_error", "", "1"},
		{"bad status knob", "/v1/chat/completions", map[string]string{"X-Fake-Status": "oops"}, 400, "invalid_request_error", "", ""},
		{"bad latency knob", "/v1/messages", map[string]string{"X-Fake-Latency": "soon"}, 400, "invalid_request_error", "", ""},
		{"negative cut knob", "/v1/chat/completions", map[string]string{"X-Fake-Cut-After": "-1"}, 400, "invalid_request_error", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{})
			status, header, b := send(t, srv, http.MethodPost, tc.path, twoMessages+`}`, tc.hdr)
			if status != tc.want {
				t.Fatalf("status %d, want %d: %s", status, tc.want, b)
			}
			if got := header.Get("retry-after"); got != tc.wantRetry {
				t.Errorf("retry-after = %q, want %q", got, tc.wantRetry)
			}
			checkErrorBody(t, tc.path, b, tc.wantType, tc.wantCode)
			if got := p.Requests(); len(got) != 1 || got[0].Status != tc.want {
				t.Errorf("log = %+v", got)
			}
		})
	}
}

func checkErrorBody(t *testing.T, path string, b []byte, wantType, wantCode string) {
	t.Helper()
	if strings.HasPrefix(path, "/v1/messages") {
		got := decode[anthropicErrorBody](t, b)
		if got.Type != "error" || got.Error.Type != wantType || got.Error.Message == "" {
			t.Errorf("body = %s, want Anthropic %s", b, wantType)
		}
		return
	}
	got := decode[openAIErrorBody](t, b)
	code := ""
	if got.Error.Code != nil {
		code = *got.Error.Code
	}
	if got.Error.Type != wantType || code != wantCode || got.Error.Message == "" {
		t.Errorf("body = %s, want OpenAI %s/%q", b, wantType, wantCode)
	}
}

func TestLatency(t *testing.T) {
	tests := []struct {
		name    string
		cfg     time.Duration
		knob    string
		atLeast time.Duration
	}{
		{"configured", 30 * time.Millisecond, "", 30 * time.Millisecond},
		{"knob", 0, "40ms", 40 * time.Millisecond},
		{"knob overrides config", time.Hour, "0s", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newServer(t, fakeprovider.Config{Latency: tc.cfg})
			hdr := map[string]string{}
			if tc.knob != "" {
				hdr["X-Fake-Latency"] = tc.knob
			}
			start := time.Now()
			status, _, _ := send(t, srv, http.MethodPost, "/v1/chat/completions", chatBodyMin, hdr)
			if elapsed := time.Since(start); status != http.StatusOK || elapsed < tc.atLeast {
				t.Errorf("status %d after %v, want 200 after at least %v", status, elapsed, tc.atLeast)
			}
		})
	}
}

func TestLatencyHonoursCancellation(t *testing.T) {
	p := fakeprovider.New(fakeprovider.Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBodyMin))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req) // returns at once: the client is already gone
	st := p.Stats()
	if st.Requests != 1 || st.Cancelled != 1 || st.Served != 0 || rec.Body.Len() != 0 {
		t.Errorf("stats = %+v, body %q", st, rec.Body)
	}
	if log := p.Requests(); len(log) != 1 || log[0].Status != 0 {
		t.Errorf("log = %+v", log)
	}
}

// streamCase is a streamed request per API; all share the content chunks.
var streamCases = []struct {
	name, path, body string
	headEvents       int // events before the first content chunk
}{
	{"chat", "/v1/chat/completions", twoMessages + `,"stream":true}`, 1},
	{"responses", "/v1/responses", `{"input":"hi","stream":true}`, 4},
	{"messages", "/v1/messages", claudeTwo + `,"stream":true}`, 3},
}

func TestStall(t *testing.T) {
	for _, sc := range streamCases {
		t.Run(sc.name, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{})
			br, cancel := openStream(t, srv, sc.path, sc.body, map[string]string{"X-Fake-Stall-After": "2"})
			for i := range sc.headEvents + 2 {
				if _, err := nextEvent(br); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
			}
			cancel() // the client gives up on the stalled stream
			srv.Close()
			st := p.Stats()
			if st.StreamsCut != 1 || st.StreamsCompleted != 0 || st.Served != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestCut(t *testing.T) {
	for _, sc := range streamCases {
		t.Run(sc.name, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{})
			br, cancel := openStream(t, srv, sc.path, sc.body, map[string]string{"X-Fake-Cut-After": "3"})
			defer cancel()
			n := 0
			var err error
			for ; err == nil; n++ {
				_, err = nextEvent(br)
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) || n-1 != sc.headEvents+3 {
				t.Errorf("read %d events then %v, want %d then unexpected EOF", n-1, err, sc.headEvents+3)
			}
			srv.Close()
			if st := p.Stats(); st.StreamsAborted != 1 || st.StreamsCompleted != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestClientGoesAwayMidStream(t *testing.T) {
	p, srv := newServer(t, fakeprovider.Config{ChunkInterval: time.Hour})
	br, cancel := openStream(t, srv, "/v1/chat/completions", twoMessages+`,"stream":true}`, nil)
	for i := range 2 { // the role chunk and the first content chunk; the next waits an hour
		if _, err := nextEvent(br); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	cancel()
	srv.Close()
	if st := p.Stats(); st.StreamsCut != 1 || st.StreamsCompleted != 0 {
		t.Errorf("stats = %+v", st)
	}
}
