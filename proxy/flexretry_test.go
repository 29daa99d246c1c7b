package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// flexProxy is a proxy whose bulk class sends gpt-4o* at flex, in front
// of fake, naming upstream.provider; mutate changes the rest.
func flexProxy(t *testing.T, upstream http.Handler, provider Provider, mutate func(*quota.Config, *classify.Config)) *testProxy {
	t.Helper()
	return newTestProxy(t, proxyOpts{upstream: upstream, mutate: func(c *Config, q *quota.Config, cc *classify.Config, _ *[]classify.Caller) {
		c.Upstream.Provider = provider
		c.Upstream.APIKey = "sk-test" // the proxy's own key: its answers speak of this account (destination.spent)
		q.Classes.Bulk.ServiceTier, q.Classes.Bulk.FlexModels = price.TierFlex, []string{"gpt-4o*"}
		if mutate != nil {
			mutate(q, cc)
		}
	}})
}

// TestFlexInjection: a request quota sends at flex arrives upstream with
// service_tier "flex" — OpenAI's and Azure's chat completions and
// Responses only — a caller's own service_tier is kept, and nothing else
// is touched: another class, a model flex_models does not list, another
// OpenAI-compatible server, Anthropic, mode: shadow.
func TestFlexInjection(t *testing.T) {
	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name       string
		provider   Provider
		mutate     func(*quota.Config, *classify.Config)
		path, body string
		want       string // the service_tier the upstream read; "" none
	}{
		{"openai chat", "openai", nil, "/v1/chat/completions", chat, "flex"},
		{"openai responses", "openai", nil, "/v1/responses", `{"model":"gpt-4o-mini","input":"hi"}`, "flex"},
		{"azure deployment", "azure", nil, "/openai/deployments/GPT-4o/chat/completions?api-version=2025-04-01-preview", `{"messages":[]}`, "flex"},
		{"the caller's tier wins", "openai", nil, "/v1/chat/completions", `{"model":"gpt-4o","service_tier":"auto","messages":[]}`, "auto"},
		{"a model flex_models does not list", "openai", nil, "/v1/chat/completions", `{"model":"gpt-4.1","messages":[]}`, ""},
		{"interactive sets no tier", "openai", func(_ *quota.Config, c *classify.Config) { c.DefaultClass = classify.Interactive },
			"/v1/chat/completions", chat, ""},
		{"interactive may set it too", "openai", func(q *quota.Config, c *classify.Config) {
			c.DefaultClass = classify.Interactive
			q.Classes.Interactive.ServiceTier, q.Classes.Interactive.FlexModels = price.TierFlex, []string{"gpt-4o"}
		}, "/v1/chat/completions", chat, "flex"},
		{"an OpenAI-compatible server", ProviderAuto, nil, "/v1/chat/completions", chat, ""},
		{"anthropic", ProviderAuto, nil, "/v1/messages", `{"model":"gpt-4o","max_tokens":5,"messages":[]}`, ""},
		{"anthropic's path under provider openai", "openai", nil, "/v1/messages", `{"model":"gpt-4o","max_tokens":5,"messages":[]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
			p := flexProxy(t, fake, tt.provider, tt.mutate)
			status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+tt.path, tt.body))
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests upstream, want 1", len(reqs))
			}
			sent := reqs[0].Body
			if got := gjson.GetBytes(sent, "service_tier").String(); got != tt.want {
				t.Errorf("upstream read service_tier %q, want %q (body %s)", got, tt.want, sent)
			}
			if tt.want != "flex" && string(sent) != tt.body {
				t.Errorf("the body was changed: %s, sent %s", tt.body, sent)
			}
		})
	}
}

// TestFlexShadow: mode: shadow changes nothing it forwards.
func TestFlexShadow(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
	p := flexProxy(t, fake, "openai", nil)
	live := *p.handler.live.Load()
	live.Shadow = true
	p.handler.Reconfigure(live)
	body := `{"model":"gpt-4o","messages":[]}`
	if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", body)); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	if sent := fake.Requests()[0].Body; string(sent) != body {
		t.Errorf("shadow sent %s, want %s unchanged", sent, body)
	}
}

// fakeTime is the retry loop's flex clock and sleep for a test
// (Handler.flexClock): sleeping moves the clock, at once, and calls
// onSleep.
type fakeTime struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  []time.Duration
	onSleep func(n int)
}

func (f *fakeTime) install(t *testing.T, h *Handler) {
	t.Helper()
	fr := &h.retry.flexClock
	f.now = time.Now()
	fr.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	fr.sleep = func(_ context.Context, d time.Duration) error {
		f.mu.Lock()
		f.now = f.now.Add(d)
		f.sleeps = append(f.sleeps, d)
		n := len(f.sleeps)
		f.mu.Unlock()
		if f.onSleep != nil {
			f.onSleep(n)
		}
		return nil
	}
}

// TestFlexRetry: while flex has no capacity the request is held and
// retried at flex, with backoff, and the caller sees the 200 once
// capacity is back; the retries are counted in
// meterproxy_flex_retries_total, and none in meterproxy_upstream_429_total.
func TestFlexRetry(t *testing.T) {
	fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true, FlexUnavailable: 1})
	p := flexProxy(t, fake, "openai", nil)
	const unavailable = 3
	clock := &fakeTime{onSleep: func(n int) {
		if n == unavailable {
			fake.SetFlexUnavailable(0)
		}
	}}
	clock.install(t, p.handler)
	status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`))
	if status != http.StatusOK || gjson.GetBytes(b, "service_tier").String() != "flex" {
		t.Fatalf("status %d, body %s: want 200 served at flex", status, b)
	}
	st := fake.Stats()
	if st.FlexUnavailable != unavailable || st.Served != 1 {
		t.Errorf("upstream: %d unavailable, %d served; want %d, 1", st.FlexUnavailable, st.Served, unavailable)
	}
	for _, r := range fake.Requests() {
		if gjson.GetBytes(r.Body, "service_tier").String() != "flex" {
			t.Errorf("a retry was sent as %s, want at flex", r.Body)
		}
	}
	if n := testutil.ToFloat64(p.handler.m.upstream.flexRetries.WithLabelValues(quota.DefaultAccount, quota.DefaultPool)); n != unavailable {
		t.Errorf("meterproxy_flex_retries_total = %v, want %d", n, unavailable)
	}
	if n := testutil.ToFloat64(p.handler.m.upstream.upstream429); n != 0 {
		t.Errorf("meterproxy_upstream_429_total = %v, want 0", n)
	}
	for i, d := range clock.sleeps { // 500ms, 1s, 2s, each with equal jitter
		if base := flexBackoffFirst << i; d < base/2 || d > base {
			t.Errorf("wait %d: %v, want within [%v, %v]", i, d, base/2, base)
		}
	}
}

// flexOr answers requests at flex 429 Resource Unavailable with a
// Retry-After of 20 seconds (which would hold bulk, were it taken for a
// rate limit), and passes every other request to next.
func flexOr(next http.Handler, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if gjson.GetBytes(b, "service_tier").String() != "flex" {
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "20")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, body)
	})
}

// TestFlexMaxWait: flex unavailable past the class's max_wait, the
// request falls back to the default tier with flex_fallback (resent
// without service_tier), and otherwise the caller gets the provider's 429.
// Either way that 429 is no rate limit: it holds nothing and is not in
// meterproxy_upstream_429_total — unlike a real rate limit's 429, the
// control case.
func TestFlexMaxWait(t *testing.T) {
	const (
		flexBody  = `{"error":{"message":"Resource Unavailable","type":"resource_unavailable","param":null,"code":"resource_unavailable"}}`
		limitBody = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	)
	tests := []struct {
		name       string
		fallback   bool
		upstream   string
		wantStatus int
		want429    float64
		wantHold   bool
	}{
		{"no fallback: the 429 is passed on", false, flexBody, http.StatusTooManyRequests, 0, false},
		{"fallback: served at the default tier", true, flexBody, http.StatusOK, 0, false},
		{"a rate limit is not flex's", false, limitBody, http.StatusTooManyRequests, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeprovider.New(fakeprovider.Config{RecordBodies: true})
			p := flexProxy(t, flexOr(fake, tt.upstream), "openai", func(q *quota.Config, _ *classify.Config) {
				q.Classes.Bulk.MaxWait, q.Classes.Bulk.FlexFallback = 5*time.Second, tt.fallback
			})
			clock := &fakeTime{}
			clock.install(t, p.handler)
			status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`))
			if status != tt.wantStatus {
				t.Fatalf("status %d (%s), want %d", status, b, tt.wantStatus)
			}
			switch {
			case status == http.StatusTooManyRequests && string(b) != tt.upstream:
				t.Errorf("the caller got %s, want the provider's 429 %s", b, tt.upstream)
			case status == http.StatusOK:
				if tier := gjson.GetBytes(b, "service_tier").String(); tier != "default" {
					t.Errorf("served at %q, want the default tier", tier)
				}
				if sent := fake.Requests()[0].Body; gjson.GetBytes(sent, "service_tier").Exists() {
					t.Errorf("the fallback sent %s, want no service_tier", sent)
				}
			}
			var waited time.Duration
			for _, d := range clock.sleeps {
				waited += d
			}
			// Held to max_wait's end, counted from admission (the real
			// clock's, a few milliseconds before this fake clock started),
			// never a backoff short of it.
			if tt.want429 == 0 && (waited > 5*time.Second+50*time.Millisecond || waited < 5*time.Second-50*time.Millisecond) {
				t.Errorf("retried for %v (%v), want max_wait, 5s", waited, clock.sleeps)
			}
			if n := testutil.ToFloat64(p.handler.m.upstream.upstream429); n != tt.want429 {
				t.Errorf("meterproxy_upstream_429_total = %v, want %v", n, tt.want429)
			}
			if tt.wantHold { // the limiter hears of it with its next store call
				waitFor(t, "the upstream hold", func() bool { return p.admitter.State().UpstreamHoldSeconds > 0 })
				return
			}
			// The next request carries a hold to the limiter, were there one.
			if status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"gpt-4.1","messages":[]}`)); status != http.StatusOK {
				t.Fatalf("next request: %d %s", status, b)
			}
			if hold := p.admitter.State().UpstreamHoldSeconds; hold != 0 {
				t.Errorf("upstream hold %vs, want none", hold)
			}
		})
	}
}

// TestFlexUnavailableMatch: what is taken for flex's 429 Resource
// Unavailable, and what is not; the body reads whole afterwards either
// way.
func TestFlexUnavailableMatch(t *testing.T) {
	long := `{"error":{"message":"` + strings.Repeat("x", maxFlexErrorBody) + ` resource unavailable"}}`
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"code", 429, `{"error":{"message":"x","type":"invalid_request_error","param":null,"code":"resource_unavailable"}}`, true},
		{"type", 429, `{"error":{"message":"x","type":"resource_unavailable","code":null}}`, true},
		{"code in capitals", 429, `{"error":{"code":"Resource_Unavailable"}}`, true},
		{"message", 429, `{"error":{"message":"Resource Unavailable. Please retry later.","type":"server_error"}}`, true},
		{"message, other words", 429, `{"error":{"message":"The requested resource not available for flex processing"}}`, true},
		{"a rate limit", 429, `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}}`, false},
		{"a rate limit that says unavailable", 429, `{"error":{"message":"resource unavailable","code":"rate_limit_exceeded"}}`, false},
		{"out of quota", 429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, false},
		{"another status", 503, `{"error":{"code":"resource_unavailable"}}`, false},
		{"not JSON", 429, `Resource Unavailable`, false},
		{"no body", 429, ``, false},
		{"past the bound", 429, long, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tt.status, Body: io.NopCloser(strings.NewReader(tt.body))}
			if got := flexUnavailable(resp); got != tt.want {
				t.Errorf("flexUnavailable = %v, want %v", got, tt.want)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != tt.body {
				t.Errorf("the body reads %d bytes (%v), want the %d it had", len(b), err, len(tt.body))
			}
		})
	}
}

// TestFlexBudgetTier: a request sent at flex is admitted against its
// budgets at the flex prices, so a worst case that fits only at flex
// fits; with flex_fallback (which may end at the default tier) or with
// the caller's own tier it is reserved at the default tier's prices, and
// refused.
func TestFlexBudgetTier(t *testing.T) {
	// max_tokens 1000 at $1000 per million output tokens is a $1 worst
	// case at the default tier, $0.50 at flex; the budget is $0.75.
	tests := []struct {
		name     string
		fallback bool
		body     string
		want     int
	}{
		{"at flex", false, `{"model":"gpt-4o","max_tokens":1000,"messages":[]}`, http.StatusOK},
		{"may fall back", true, `{"model":"gpt-4o","max_tokens":1000,"messages":[]}`, http.StatusTooManyRequests},
		{"the caller's tier", false, `{"model":"gpt-4o","max_tokens":1000,"service_tier":"auto","messages":[]}`, http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := flexProxy(t, fakeprovider.New(fakeprovider.Config{}), "openai", func(q *quota.Config, _ *classify.Config) {
				q.Prices = []price.Price{{Match: []string{"gpt-4o*"}, Input: 1, Output: 1000, Flex: &price.TierPrice{Input: 0.5, Output: 500}}}
				q.Classes.Bulk.Budget = classify.Budget{USD: 0.75, Per: classify.PerDay}
				q.Classes.Bulk.FlexFallback = tt.fallback
			})
			status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", tt.body))
			if status != tt.want {
				t.Fatalf("status %d (%s), want %d", status, b, tt.want)
			}
			if status == http.StatusTooManyRequests && !strings.Contains(string(b), "budget_exceeded") {
				t.Errorf("refused with %s, want budget_exceeded", b)
			}
		})
	}
}
