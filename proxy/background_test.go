package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// backgroundUpstream answers a Responses request as the provider does: a
// background one at once, queued, with no usage (generation goes on after
// the answer); any other with its usage.
func backgroundUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), `"background":true`) {
			_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"queued","background":true,"usage":null}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"resp_2","object":"response","status":"completed","usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}`)
	})
}

// TestBackgroundResponseKeepsItsCharge: a Responses request with
// background: true is answered at once (queued, no usage) while the
// provider goes on generating, so the answer says nothing of what it will
// cost. It is never settled below its admission charge (issue 21, item
// 8): on an OpenAI-compatible server, where charges settle to the usage,
// it was settled to its input estimate, giving back the 1,000 output
// tokens it may still generate. It is counted in
// meterproxy_background_responses_total.
func TestBackgroundResponseKeepsItsCharge(t *testing.T) {
	const maxOutput = 1000
	// Both requests must be charged in one second to be read in one
	// window; a run that straddles a second is run again.
	for attempt := range 5 {
		p := newTestProxy(t, proxyOpts{upstream: backgroundUpstream(), mutate: func(_ *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
			q.Account.TokensPerMinute = 60 * 1_000_000 // far from any limit
		}})
		second := time.Now().Unix()
		for _, body := range []string{
			`{"model":"m","input":"hi","background":true,"max_output_tokens":1000}`,
			`{"model":"m","input":"hi","max_output_tokens":1000}`,
		} {
			if status, _, raw := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/responses", body)); status != http.StatusOK {
				t.Fatalf("%s: %d %s", body, status, raw)
			}
			// The lease is released after the response is metered and settled.
			waitFor(t, "the request to settle", func() bool {
				st := p.admitter.State()
				return st.InFlight["interactive"]+st.InFlight["bulk"] == 0
			})
		}
		window := p.admitter.State().Window // the second request's store call, which carries the first's settling
		if window.Sec != second || time.Now().Unix() != second {
			t.Logf("attempt %d straddled a second; again", attempt)
			continue
		}
		if used := window.Tokens[classify.Interactive] + window.Tokens[classify.Bulk]; used < 2*maxOutput {
			t.Errorf("the window holds %d tokens after a background request and another, each charged at least %d: the background one was settled below its charge", used, maxOutput)
		}
		if got := metricValue(t, p.reg, "meterproxy_background_responses_total", map[string]string{"class": classify.DefaultConfig().DefaultClass.String()}); got != 1 {
			t.Errorf("meterproxy_background_responses_total %v, want 1", got)
		}
		return
	}
	t.Fatal("every attempt straddled a second")
}
