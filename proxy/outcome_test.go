package proxy

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// tally is meterproxy_requests_total by outcome and code ("forwarded
// 200"), meterproxy_refusals_total by reason ("reason queue_full"),
// meterproxy_negotiations_total by reason ("negotiation not_an_api") and
// meterproxy_responses_cut_short_total by side ("cut client"), summed
// over every other label.
func tally(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetName() {
			case "meterproxy_requests_total":
				sum[l["outcome"]+" "+l["code"]] += m.GetCounter().GetValue()
			case "meterproxy_refusals_total":
				sum["reason "+l["reason"]] += m.GetCounter().GetValue()
			case "meterproxy_negotiations_total":
				sum["negotiation "+l["reason"]] += m.GetCounter().GetValue()
			case "meterproxy_responses_cut_short_total":
				sum["cut "+l["side"]] += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// delta is what changed from before to after, by key.
func delta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// expectOutcome runs send and waits until exactly one request more is
// counted, then checks it is counted once, as want says (e.g.
// "forwarded 200", "refused 429", "cancelled none"), with its refusal
// reason and the side a response was cut on, if any. The cut is read in
// the same gathering as the outcome: a reading that has the outcome has
// the cut too.
func expectOutcome(t *testing.T, reg *prometheus.Registry, want, reason, cut string, send func()) {
	t.Helper()
	before := tally(t, reg)
	send()
	wantDelta := map[string]float64{want: 1}
	if reason != "" {
		wantDelta["reason "+reason] = 1
	}
	if cut != "" {
		wantDelta["cut "+cut] = 1
	}
	var got map[string]float64
	// The outcome and a cut are counted at different moments of the
	// request's end (the cut as the copy fails, the outcome as the handler
	// returns): wait for every count expected, then check nothing else was.
	waitFor(t, "the request's outcome to be counted", func() bool {
		got = delta(before, tally(t, reg))
		for k := range wantDelta {
			if got[k] < 1 {
				return false
			}
		}
		return true
	})
	if !maps.Equal(got, wantDelta) {
		t.Errorf("counted %v, want %v", got, wantDelta)
	}
}

// TestEveryRequestCountedOnce: the accounting identity — every request
// ends as exactly one of forwarded (with the upstream's status), refused
// (with meterproxy's status and one refusal of its reason) or cancelled —
// on every path a request can take through the handler.
func TestEveryRequestCountedOnce(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: statusUpstream(), mutate: func(c *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		c.Server.MaxBodyBytes, c.Server.MaxUploadBytes = 4096, 1<<20
		c.Upstream.ResponseHeaderTimeout, c.Upstream.Provider = 300*time.Millisecond, "openai"
		q.Account.TokensPerMinute = 6000
	}})
	post := func(path, body string, headers ...string) func() {
		return func() {
			req := newRequest(t, http.MethodPost, p.URL+path, body)
			for i := 0; i+1 < len(headers); i += 2 {
				req.Header.Set(headers[i], headers[i+1])
			}
			if strings.HasPrefix(body, "chunked:") {
				req.Body, req.ContentLength = io.NopCloser(io.LimitReader(zeros{}, 2<<20)), -1
			}
			do(t, req)
		}
	}
	cutByClient := func() {
		req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"stream":true}`)
		req.Header.Set("X-Test-Stream", "wait")
		ctx, cancel := context.WithCancel(t.Context())
		res, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = res.Body.Read(make([]byte, 64)) // the stream has begun
		cancel()
		_ = res.Body.Close()
	}
	cutByUpstream := func() {
		res, err := http.DefaultClient.Do(func() *http.Request {
			req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"stream":true}`)
			req.Header.Set("X-Test-Stream", "abort")
			return req
		}())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body) // ends in an error: the stream was cut
		_ = res.Body.Close()
	}
	for _, tt := range []struct {
		name, want, reason, cut string
		send                    func()
	}{
		{"forwarded 2xx", "forwarded 200", "", "", post("/v1/chat/completions", `{}`)},
		{"forwarded 4xx", "forwarded 404", "", "", post("/v1/chat/completions", `{}`, "X-Test-Status", "404")},
		{"forwarded 5xx", "forwarded 500", "", "", post("/v1/chat/completions", `{}`, "X-Test-Status", "500")},
		{"forwarded, not metered", "forwarded 200", "", "", post("/v1/models", ``)},
		{"refused before the body: method", "refused 405", reasonMethod, "", func() {
			do(t, newRequest(t, "TRACE", p.URL+"/v1/chat/completions", ""))
		}},
		{"refused before the body: path", "refused 400", reasonNonCanonicalPath, "", post("/v1/batches/%2e%2e/chat/completions", `{}`)},
		{"refused before the body: encoding", "refused 415", reasonUnsupportedEncoding, "", post("/v1/chat/completions", `{}`, "Content-Encoding", "gzip")},
		{"body too large", "refused 413", reasonBodyTooLarge, "", post("/v1/chat/completions", strings.Repeat("x", 5000))},
		{"body refused", "refused 400", reasonDuplicateKey, "", post("/v1/chat/completions", `{"model":"a","model":"b"}`)},
		{"admission refused: charge", "refused 400", reasonChargeTooLarge, "", post("/v1/chat/completions", `{"max_tokens":100000}`)},
		{"upstream timeout", "refused 504", reasonTimeout, "", post("/v1/chat/completions", `{}`, "X-Test-Stall", "1")},
		{"cut short by the client", "forwarded 200", "", "client", cutByClient},
		{"cut short by the upstream", "forwarded 200", "", "upstream", cutByUpstream},
		{"batch", "forwarded 200", "", "", post("/v1/batches", `{"input_file_id":"f"}`)},
		{"upload", "forwarded 200", "", "", post("/v1/files", `data`)},
		{"upload, upstream 4xx", "forwarded 401", "", "", post("/v1/files", `data`, "X-Test-Status", "401")},
		{"upload too large, declared", "refused 413", reasonBodyTooLarge, "", func() {
			req := newRequest(t, http.MethodPost, p.URL+"/v1/files", "")
			req.Body, req.ContentLength = io.NopCloser(io.LimitReader(zeros{}, 2<<20)), 2<<20
			do(t, req)
		}},
		{"upload too large, streamed", "refused 413", reasonBodyTooLarge, "", post("/v1/uploads", "chunked:", "X-Test-Stall", "1")},
		{"shadow mode", "forwarded 200", "", "", func() {
			live := *p.handler.live.Load()
			live.Shadow = true
			p.handler.Reconfigure(live)
			defer func() { live.Shadow = false; p.handler.Reconfigure(live) }()
			post("/v1/chat/completions", `{}`)()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { expectOutcome(t, p.reg, tt.want, tt.reason, tt.cut, tt.send) })
	}

	t.Run("upstream unreachable", func(t *testing.T) {
		dead := newTestProxy(t, proxyOpts{upstream: statusUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
			c.Upstream.URL = "http://127.0.0.1:1" // nothing listens on port 1
		}})
		expectOutcome(t, dead.reg, "refused 502", reasonUnreachable, "", func() {
			do(t, newRequest(t, http.MethodPost, dead.URL+"/v1/chat/completions", `{}`))
		})
	})

	t.Run("waiting: queue full, then cancelled", func(t *testing.T) {
		slow := newTestProxy(t, proxyOpts{upstream: statusUpstream(), mutate: slowQuota})
		ctx, cancel := context.WithCancel(t.Context())
		held := make(chan error, 1)
		go func() {
			for { // admitted in an admitting second: go again until one waits
				req := newRequest(t, http.MethodPost, slow.URL+"/v1/chat/completions", "{}").WithContext(ctx)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					held <- err
					return
				}
				_ = res.Body.Close()
			}
		}()
		waitFor(t, "a bulk request to be held", func() bool { return slow.admitter.State().Queued["bulk"] == 1 })
		expectOutcome(t, slow.reg, "refused 429", reasonQueueFull, "", func() {
			do(t, newRequest(t, http.MethodPost, slow.URL+"/v1/chat/completions", "{}"))
		})
		expectOutcome(t, slow.reg, "cancelled none", "", "", func() {
			cancel()
			if err := <-held; err == nil {
				t.Error(fmt.Errorf("the held request was answered"))
			}
		})
	})
}
