package fakeprovider_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// t0 is the fake clock's start: a whole second, so resets are exact.
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newServer serves a provider for cfg (with a fake clock unless cfg has
// one) until the test ends.
func newServer(t *testing.T, cfg fakeprovider.Config) (*fakeprovider.Provider, *httptest.Server) {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = newClock().Now
	}
	p := fakeprovider.New(cfg)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Cleanup(p.CloseSockets) // first: the server does not wait for hijacked connections
	return p, srv
}

// send sends body to path with the given headers and returns the status,
// headers and whole body of the response; the body is read and closed here.
func send(t *testing.T, srv *httptest.Server, method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err = errors.Join(err, resp.Body.Close()); err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// post is send with method POST and no extra headers.
func post(t *testing.T, srv *httptest.Server, path, body string) (int, http.Header, []byte) {
	t.Helper()
	return send(t, srv, http.MethodPost, path, body, nil)
}

// decode unmarshals b into a T or fails the test.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// sseMsg is one parsed server-sent event.
type sseMsg struct {
	event string
	data  string
}

// nextEvent reads one event from br.
func nextEvent(br *bufio.Reader) (sseMsg, error) {
	var m sseMsg
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && m == (sseMsg{}) {
				return m, io.EOF
			}
			return m, io.ErrUnexpectedEOF
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if m != (sseMsg{}) {
				return m, nil
			}
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			m.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// parseSSE reads every event of a whole stream.
func parseSSE(t *testing.T, b []byte) []sseMsg {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(string(b)))
	var out []sseMsg
	for {
		m, err := nextEvent(br)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("parse SSE: %v in %q", err, b)
		}
		out = append(out, m)
	}
}

// openStream posts a streaming request and returns a reader over its
// events; cancel ends the request. The body is closed when the test ends.
func openStream(t *testing.T, srv *httptest.Server, path, body string, hdr map[string]string) (*bufio.Reader, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return bufio.NewReader(resp.Body), cancel
}

// promptTokens mirrors the provider's estimate: body bytes / 4, rounded up.
func promptTokens(body string) int { return max((len(body)+3)/4, 1) }

// Reply texts of the default configuration.
const (
	reply2 = "echo: 2 messages this is a deterministic fake reply"
	reply1 = "echo: 1 messages this is a deterministic fake reply"
)

type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}
