package test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// readToTerminal posts a streamed request and reads its answer up to the
// end of the event terminal names (its first line, as "event:
// response.completed" or "data: [DONE]"), then goes away at once, as
// Codex does after response.completed: it closes the connection without
// reading on. It returns what it read.
func readToTerminal(t *testing.T, url, body string, headers map[string]string, terminal string) []byte {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	var got bytes.Buffer
	sc := bufio.NewScanner(res.Body)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		got.WriteString(line + "\n")
		switch {
		case line == terminal:
			seen = true
		case seen && line == "":
			return got.Bytes() // the terminal event is whole: leave now
		}
	}
	t.Fatalf("the stream ended without %q (%v): %s", terminal, sc.Err(), got.Bytes())
	return nil
}

// TestStreamWholeAtItsTerminalEvent: issue 33 — a client that goes away
// right after a stream's terminal event (Codex closes its connection
// after response.completed), while the upstream's end lags it, got the
// whole answer: the request is metered at the usage the terminal event
// reported (estimated="false"), forwarded, and not counted cut short.
// Before the fix, each API's request was metered as an estimate and cut
// short by the client.
func TestStreamWholeAtItsTerminalEvent(t *testing.T) {
	t.Parallel()
	// The stream's end lags its last event until the client goes away.
	fake := fakeprovider.New(fakeprovider.Config{Now: fixedNow, EndLag: time.Hour})
	up := startUpstream(t, fake)
	p := startProxy(t, probeConfig(up.URL), probeEnv, callerKey)
	for _, tt := range []struct {
		name, path, body, terminal string
	}{
		{"responses", "/v1/responses", `{"model":"gpt-4o","stream":true,"input":"say hi"}`, "event: response.completed"},
		{"messages", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"say hi"}]}`,
			"event: message_stop"},
		{"chat completions", "/v1/chat/completions",
			`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"say hi"}]}`, "data: [DONE]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m0 := scrape(t, p.AdminURL)
			before := readTokens(m0, probeCaller)
			got := readToTerminal(t, p.URL+tt.path, tt.body, probeHeaders(tt.path), tt.terminal)
			billed, ok := billedUsage(tt.path, true, got)
			if !ok {
				t.Fatalf("the stream reported no usage: %s", got)
			}
			d := tokensAfter(t, p.AdminURL, probeCaller, before, 1)
			m1 := scrape(t, p.AdminURL)
			if d.reported != billed || d.estimated != (tokenCount{}) {
				t.Errorf("metered %v reported and %v estimated, want %v reported, none estimated", d.reported, d.estimated, billed)
			}
			if n := sum(m1, "meterproxy_responses_cut_short_total", nil) - sum(m0, "meterproxy_responses_cut_short_total", nil); n != 0 {
				t.Errorf("%v response(s) counted cut short, want none", n)
			}
			fwd := map[string]string{"outcome": "forwarded", "code": "200"}
			if n := sum(m1, "meterproxy_requests_total", fwd) - sum(m0, "meterproxy_requests_total", fwd); n != 1 {
				t.Errorf("%v requests forwarded 200, want 1", n)
			}
		})
	}
}
