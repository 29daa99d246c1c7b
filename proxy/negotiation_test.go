package proxy

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestNegotiationsAreNotRefusals: issue 33 — the front door's answers that
// are protocol negotiation are counted in meterproxy_negotiations_total
// alone, never as a request or a refusal of a class (whose alerts fired
// for every start of Codex and Claude Code), and never reach the upstream:
// an upgrade meterproxy does not meter is answered 426 (it was 400
// upgrade_not_supported, on which Codex gave up), a HEAD or GET without a
// configured key on a path no API has 404. An unknown caller on an API
// path, a probe by a known caller and one under unknown_callers: forward
// are what they were.
func TestNegotiationsAreNotRefusals(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{})
	start := func(unknown classify.UnknownCallers) *testProxy {
		return newTestProxy(t, proxyOpts{upstream: fake, environ: map[string]string{"CHAT": "sk-chat"},
			mutate: func(_ *Config, _ *quota.Config, c *classify.Config, callers *[]classify.Caller) {
				c.UnknownCallers = unknown
				*callers = []classify.Caller{{Name: "chat", KeyEnv: "CHAT", Class: classify.Interactive}}
			}})
	}
	reject, forward := start(classify.UnknownReject), start(classify.UnknownForward)
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13",
		"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "OpenAI-Beta", "responses_websockets=2026-02-06"}
	h2c := []string{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA"}
	known, stranger := []string{"Authorization", "Bearer sk-chat"}, []string{"Authorization", "Bearer sk-nobody"}
	for _, tt := range []struct {
		name         string
		p            *testProxy
		method, path string
		headers      []string
		status       int
		// code is the error body's code ("" for none: a HEAD's answer, or
		// the upstream's); counted is the tally's change.
		code    string
		counted map[string]float64
	}{
		// (/v1/responses and /v1/realtime are WebSockets meterproxy
		// meters: socket_test.go, socketrealtime_test.go.)
		{"a WebSocket on an API not relayed", reject, http.MethodGet, "/v1/chat/completions", append(ws, known...), http.StatusUpgradeRequired, negotiationUpgrade,
			map[string]float64{"negotiation upgrade_required": 1}},
		{"a WebSocket without a key", reject, http.MethodGet, "/v1/assistants", ws, http.StatusUpgradeRequired, negotiationUpgrade,
			map[string]float64{"negotiation upgrade_required": 1}},
		{"an h2c upgrade", forward, http.MethodGet, "/v1/models", append(h2c, known...), http.StatusUpgradeRequired, negotiationUpgrade,
			map[string]float64{"negotiation upgrade_required": 1}},
		{"Claude Code's HEAD /api/hello", reject, http.MethodHead, "/api/hello", nil, http.StatusNotFound, "",
			map[string]float64{"negotiation not_an_api": 1}},
		{"GET / without a key", reject, http.MethodGet, "/", nil, http.StatusNotFound, negotiationNotAPI,
			map[string]float64{"negotiation not_an_api": 1}},
		{"GET with a key no caller has", reject, http.MethodGet, "/health", stranger, http.StatusNotFound, negotiationNotAPI,
			map[string]float64{"negotiation not_an_api": 1}},
		// Not negotiations.
		{"HEAD on an API path without a key", reject, http.MethodHead, "/v1/models", nil, http.StatusUnauthorized, "",
			map[string]float64{"refused 401": 1, "reason unknown_caller": 1}},
		{"POST on no API path without a key", reject, http.MethodPost, "/api/hello", nil, http.StatusUnauthorized, reasonUnknownCaller,
			map[string]float64{"refused 401": 1, "reason unknown_caller": 1}},
		{"a known caller's probe", reject, http.MethodHead, "/api/hello", known, http.StatusNotFound, "",
			map[string]float64{"forwarded 404": 1}},
		{"a probe under unknown_callers: forward", forward, http.MethodGet, "/api/hello", nil, http.StatusNotFound, "",
			map[string]float64{"forwarded 404": 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, seen := tally(t, tt.p.reg), fake.Stats().Requests
			req := newRequest(t, tt.method, tt.p.URL+tt.path, "")
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			status, _, body := do(t, req)
			if status != tt.status {
				t.Errorf("status %d, want %d: %s", status, tt.status, body)
			}
			if tt.code != "" {
				var e openAIError
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tt.code {
					t.Errorf("body %s, want OpenAI's error shape with code %s", body, tt.code)
				}
			}
			var got map[string]float64
			waitFor(t, "the answer to be counted", func() bool {
				got = delta(before, tally(t, tt.p.reg))
				for k := range tt.counted {
					if got[k] < 1 {
						return false
					}
				}
				return true
			})
			if !maps.Equal(got, tt.counted) {
				t.Errorf("counted %v, want %v", got, tt.counted)
			}
			_, forwarded := tt.counted["forwarded 404"]
			if reached := fake.Stats().Requests > seen; reached != forwarded {
				t.Errorf("the upstream saw it: %v, want %v", reached, forwarded)
			}
		})
	}
}
