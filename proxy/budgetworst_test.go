package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// worstPrice is the price TestCutStreamChargesItsWorstCase charges at:
// output dear, so that a worst case and an estimate differ by far.
var worstPrice = price.Price{Match: []string{"gpt-4o*"}, Input: 1, Output: 1000}

// TestCutStreamChargesItsWorstCase (issue 31, item 5c): a stream cut
// before its usage came is charged to its budget at its worst case — the
// whole of it, at max_input for a request whose input is hidden — not at
// the text it showed ÷ 4, which is below what a reasoning model bills. A
// stream that ended whole is charged its reported usage, and one that
// ended whole without usage (no include_usage) its estimate.
func TestCutStreamChargesItsWorstCase(t *testing.T) {
	const chat = `{"model":"gpt-4o","max_tokens":100,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	const noUsage = `{"model":"gpt-4o","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	const hidden = `{"model":"gpt-4o","previous_response_id":"resp_1","input":"hi","max_output_tokens":100,"stream":true}`
	worst := func(body string, input int64) price.Nanodollars {
		return worstPrice.WorstCase(max(input, usage.EstimateInput([]byte(body))), 100, "")
	}
	for _, tt := range []struct {
		name, path, body string
		api              usage.API
		cut              bool
		// want is the charge; 0: the answer's usage as the meter reads it,
		// priced.
		want price.Nanodollars
	}{
		{"chat stream cut", "/v1/chat/completions", chat, usage.ChatCompletions, true, worst(chat, 0)},
		{"chat stream whole", "/v1/chat/completions", chat, usage.ChatCompletions, false, 0},
		{"chat stream whole without usage", "/v1/chat/completions", noUsage, usage.ChatCompletions, false, 0},
		{"responses stream cut, input hidden", "/v1/responses", hidden, usage.Responses, true, worst(hidden, price.DefaultMaxInput("gpt-4o", false))},
		{"responses stream whole, input hidden", "/v1/responses", hidden, usage.Responses, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProxy(t, proxyOpts{upstream: fakeprovider.New(fakeprovider.Config{}), mutate: func(c *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
				c.Upstream.APIKey = "sk-test" // the proxy's own key: its answers spend this account (destination.spent)
				q.Prices = []price.Price{worstPrice}
				q.Classes.Interactive.Budget = classify.Budget{USD: 100, Per: classify.PerDay}
				q.Classes.Bulk.Budget = classify.Budget{USD: 100, Per: classify.PerDay}
			}})
			req := newRequest(t, http.MethodPost, p.URL+tt.path, tt.body)
			if tt.cut {
				req.Header.Set(fakeprovider.HeaderCutAfter, "2")
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusOK || (err != nil) != tt.cut {
				t.Fatalf("status %d, read error %v; want 200, cut %v", res.StatusCode, err, tt.cut)
			}
			want := tt.want
			if want == 0 {
				m := usage.NewMeter(tt.api, res.Header.Get("Content-Type"), usage.EstimateInput([]byte(tt.body)))
				_, _ = m.Write(body)
				u := m.Finish(true)
				want = worstPrice.Cost(price.Usage{Input: u.Input, Output: u.Output})
				if want >= worst(tt.body, 0) {
					t.Fatalf("the answer's usage %+v costs %s, not below the worst case", u, want)
				}
			}
			var spent float64
			waitFor(t, "the budget to settle", func() bool {
				for _, b := range p.admitter.State().Budgets {
					if strings.HasPrefix(b.Budget, "class:") && b.Spent > 0 && b.Reserved == 0 {
						spent = b.Spent
						return true
					}
				}
				return false
			})
			if got := price.Nanodollars(spent*1e9 + 0.5); got != want {
				t.Errorf("the budget was charged %s, want %s", got, want)
			}
		})
	}
}
