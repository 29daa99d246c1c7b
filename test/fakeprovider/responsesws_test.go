package fakeprovider_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestResponsesSocketTurnEqualsSSE: a response.create on a socket is
// answered with the events of the same request over HTTP SSE, byte for
// byte, and logged with the same usage — on OpenAI's path and Azure's.
func TestResponsesSocketTurnEqualsSSE(t *testing.T) {
	// The HTTP body the event stands for: its fields less type, plus
	// "stream": true, keys sorted.
	const body = `{"input":[{"role":"user","content":"hi <there>"},{"role":"user","content":"again"}],"max_output_tokens":50,"metadata":{"a":"b"},"model":"gpt-test","stream":true}`
	const event = `{"type":"response.create","model":"gpt-test","input":[{"role":"user","content":"hi <there>"},{"role":"user","content":"again"}],"metadata":{"a":"b"},"max_output_tokens":50}`
	for _, path := range []string{"/v1/responses", "/openai/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{RPM: 600, TPM: 100000})
			_, hdr, b := post(t, srv, path, body)
			var want []string
			for _, m := range parseSSE(t, b) {
				want = append(want, m.data)
			}
			c := dial(t, srv, path, http.Header{"Authorization": {"Bearer sk-test"}})
			sendEvent(t, c, event)
			var got []string
			for _, ev := range readUntil(t, c, "response.completed") {
				got = append(got, ev.raw)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("socket events differ from SSE:\ngot  %q\nwant %q", got, want)
			}
			if err := p.WaitIdle(t.Context()); err != nil {
				t.Fatal(err)
			}
			reqs := p.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests logged, want 2", len(reqs))
			}
			httpReq, turn := reqs[0], reqs[1]
			if turn.Socket != fakeprovider.SocketResponses || httpReq.Socket != "" {
				t.Errorf("socket kinds %q, %q", httpReq.Socket, turn.Socket)
			}
			if turn.Usage == nil || !reflect.DeepEqual(turn.Usage, httpReq.Usage) {
				t.Errorf("turn usage %+v, HTTP usage %+v", turn.Usage, httpReq.Usage)
			}
			if want := promptTokens(body); turn.Usage.InputTokens != want {
				t.Errorf("input tokens %d, want %d (a quarter of the body the event stands for)", turn.Usage.InputTokens, want)
			}
			if turn.Header.Get("Authorization") != "Bearer sk-test" || turn.Status != http.StatusOK {
				t.Errorf("turn logged with status %d, authorization %q", turn.Status, turn.Header.Get("Authorization"))
			}
			// The buckets: one request each, the same prompt spent.
			if hdr.Get("x-ratelimit-remaining-requests") != "599" {
				t.Errorf("HTTP remaining requests %q", hdr.Get("x-ratelimit-remaining-requests"))
			}
			if httpReq.TokensRemaining-turn.TokensRemaining != promptTokens(body) {
				t.Errorf("tokens remaining %d then %d, want a difference of %d", httpReq.TokensRemaining, turn.TokensRemaining, promptTokens(body))
			}
			st := p.Stats()
			if st.Requests != 2 || st.Served != 2 || st.SocketTurns != 1 || st.ResponsesSockets != 1 || st.StreamsCompleted != 2 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}
