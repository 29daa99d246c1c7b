package test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestDeepSeekKeepAlivesThroughTheProxy: DeepSeek's answer begins at once
// and fills a queued request's wait with ": keep-alive" comments (a
// stream) or empty lines (JSON). Through the binary they reach the client
// as sent, count no output — the tokens counted are the usage reported,
// none estimated — and a wait longer than
// upstream.response_header_timeout never times the request out.
func TestDeepSeekKeepAlivesThroughTheProxy(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{Dialect: fakeprovider.DialectDeepSeek, Latency: 1500 * time.Millisecond,
		KeepAlive: 100 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("upstream.provider", "openai-compatible")
	cfg.set("upstream.response_header_timeout", "1s") // shorter than the queue
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 2)
	hdr := map[string]string{"Authorization": "Bearer " + chatKey}
	for _, tc := range []struct {
		name, body, keepAlive, rest string
	}{
		{"stream", `{"model":"deepseek-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			": keep-alive\n\n", "data: "},
		{"json", `{"model":"deepseek-chat","messages":[{"role":"user","content":"hi"}]}`, "\n", "{"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.Reset()
			before := scrape(t, p.AdminURL)
			status, _, b := post(t, client, p.URL+"/v1/chat/completions", tc.body, hdr)
			rest := string(b)
			n := 0
			for strings.HasPrefix(rest, tc.keepAlive) {
				rest, n = rest[len(tc.keepAlive):], n+1
			}
			if status != http.StatusOK || n < 5 || !strings.HasPrefix(rest, tc.rest) {
				t.Fatalf("%d, %d keep-alives first: %.300q", status, n, b)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 || reqs[0].Usage == nil {
				t.Fatalf("the provider logged %d requests: %+v", len(reqs), reqs)
			}
			u := reqs[0].Usage
			waitFor(t, "the answer settled", func() bool {
				return sum(scrape(t, p.AdminURL), "meterproxy_tokens_total", map[string]string{"kind": "output"})-
					sum(before, "meterproxy_tokens_total", map[string]string{"kind": "output"}) > 0
			})
			after := scrape(t, p.AdminURL)
			for _, c := range []struct {
				kind, estimated string
				want            int
			}{{"input", "false", u.InputTokens}, {"output", "false", u.OutputTokens}, {"input", "true", 0}, {"output", "true", 0}} {
				l := map[string]string{"kind": c.kind, "estimated": c.estimated}
				if got := sum(after, "meterproxy_tokens_total", l) - sum(before, "meterproxy_tokens_total", l); got != float64(c.want) {
					t.Errorf("meterproxy_tokens_total{kind=%q,estimated=%q} rose %v, want %d", c.kind, c.estimated, got, c.want)
				}
			}
		})
	}
	if n := sum(scrape(t, p.AdminURL), "meterproxy_requests_total", map[string]string{"code": "504"}); n != 0 {
		t.Errorf("meterproxy_requests_total{code=504} = %v: a queued request timed out", n)
	}
}
