package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// overCapacityBody is Together's 503 for a model over capacity, in
// OpenAI's error shape.
const overCapacityBody = `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":"server_is_overloaded"}}`

// TestUpstream503IsNotOurRate: Together answers 503 when the model is over
// capacity and 429 when the caller is over its rate (issue 36 item 3). A
// 503 is the provider's capacity, not the account's bucket: it is passed
// to the caller as sent, counted by its code and not as a 429, and holds
// bulk only when its rate-limit headers say the account is below the
// reserve — never on its retry-after, which only a 429's holds by. A 429
// holds on its retry-after. (This held before it was pinned.)
func TestUpstream503IsNotOurRate(t *testing.T) {
	tests := []struct {
		name   string
		status int
		kv     []string
		hold   bool
	}{
		{"503 with room and a retry-after", http.StatusServiceUnavailable,
			[]string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "x-ratelimit-reset", "0.1", "retry-after", "5"}, false},
		{"503 without rate-limit headers", http.StatusServiceUnavailable, []string{"retry-after", "5"}, false},
		{"503 whose headers say the account is below the reserve", http.StatusServiceUnavailable,
			[]string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "0.9"}, true},
		{"429 with room holds on its retry-after", http.StatusTooManyRequests,
			[]string{"x-ratelimit-limit", "10", "x-ratelimit-remaining", "9", "retry-after", "5"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := headersProxy(t, tt.status, tt.kv, overCapacityBody)
			send := func() {
				t.Helper()
				status, _, b := do(t, newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`))
				if status != tt.status || (tt.status == http.StatusServiceUnavailable && string(b) != overCapacityBody) {
					t.Fatalf("the caller got %d %s, want the upstream's %d as sent", status, b, tt.status)
				}
			}
			send()
			if tt.hold {
				waitFor(t, "the upstream hold", func() bool { return p.admitter.State().UpstreamHoldSeconds > 0 })
			} else {
				send() // the next request carries a hold to the limiter, were there one
				if hold := p.admitter.State().UpstreamHoldSeconds; hold != 0 {
					t.Errorf("upstream hold %vs, want none: a 503 is no word on the account's rate", hold)
				}
				if n := sumSeries(t, p, "meterproxy_admissions_total", map[string]string{"outcome": "held"}); n != 0 {
					t.Errorf("meterproxy_admissions_total{outcome=held} = %v, want 0: the next request waited", n)
				}
			}
			want429 := 0.0
			if tt.status == http.StatusTooManyRequests {
				want429 = 1
			}
			if n := counterValue(t, p.reg, "meterproxy_upstream_429_total", nil); n != want429 {
				t.Errorf("meterproxy_upstream_429_total = %v, want %v", n, want429)
			}
			if tt.status == http.StatusServiceUnavailable {
				if n := sumSeries(t, p, "meterproxy_requests_total", map[string]string{"code": "503", "outcome": "forwarded"}); n < 1 {
					t.Errorf("meterproxy_requests_total{code=503,outcome=forwarded} = %v, want the 503s counted", n)
				}
			}
		})
	}
}

// TestSpillPassesA503On: an account whose model is over capacity (503) is
// not moved from, as no 5xx is (spill.go moves a 429 and a request that
// never left): the caller gets the 503 as sent, the next account sees
// nothing, no spill is counted.
func TestSpillPassesA503On(t *testing.T) {
	ptu := &accountServer{}
	ptu.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ptu.mu.Lock()
		ptu.keys = append(ptu.keys, r.Header.Get("Authorization"))
		ptu.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-ratelimit-limit", "10")
		w.Header().Set("x-ratelimit-remaining", "9")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(overCapacityBody))
	}))
	t.Cleanup(ptu.Close)
	paygo := newAccountServer(t, http.StatusOK)
	p := spillProxy(t, ptu, paygo)
	if status, body := postChat(t, p); status != http.StatusServiceUnavailable || string(body) != overCapacityBody {
		t.Fatalf("caller got %d %s, want the PTU's 503 as sent", status, body)
	}
	if len(ptu.seen()) != 1 || len(paygo.seen()) != 0 {
		t.Errorf("sent %d to the PTU and %d to pay-as-you-go, want 1 and 0", len(ptu.seen()), len(paygo.seen()))
	}
	if n := counterValue(t, p.reg, "meterproxy_account_spills_total", nil); n != 0 {
		t.Errorf("meterproxy_account_spills_total = %v, want 0", n)
	}
	if n := counterValue(t, p.reg, "meterproxy_upstream_429_total", nil); n != 0 {
		t.Errorf("meterproxy_upstream_429_total = %v, want 0", n)
	}
}
