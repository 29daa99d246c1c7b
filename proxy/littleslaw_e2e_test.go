package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// TestLittlesLawGaugeUnderKnownLoad drives a known load through the proxy —
// 10 clients, each always with one request in flight against an upstream
// that takes 200 ms — and checks meterproxy_measured_in_flight reads 10
// within 10%.
func TestLittlesLawGaugeUnderKnownLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("11 s load run; skipped with -short")
	}
	const clients = 10
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`{}`))
	})
	p := newTestProxy(t, proxyOpts{upstream: upstream, mutate: func(_ *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
		q.Account.RequestsPerMinute = 600000
	}})
	stop := time.Now().Add(littleWindow*time.Second + 1500*time.Millisecond)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(stop) {
				req := newRequest(t, http.MethodPost, p.URL+"/v1/chat/completions", "{}")
				req.Header.Set("X-Meterproxy-Class", "bulk")
				if status, _, _ := do(t, req); status != http.StatusOK {
					t.Errorf("status %d", status)
					return
				}
			}
		})
	}
	<-time.After(time.Until(stop.Add(-100 * time.Millisecond))) // read the gauge while the load still runs
	got := metricValue(t, p.reg, "meterproxy_measured_in_flight", map[string]string{"class": "bulk"})
	wg.Wait()
	if got < clients*0.9 || got > clients*1.1 {
		t.Errorf("measured in flight %.2f, want %d ± 10%%", got, clients)
	}
	t.Logf("drove %d in flight; the Little's-law gauge read %.2f", clients, got)
}
