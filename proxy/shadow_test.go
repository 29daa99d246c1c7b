package proxy

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/test/poll"
)

// TestShadowDecidesAsEnforcementWould: the same traffic, each request sent
// at once to an enforcing proxy and to one in mode: shadow in front of a
// fast upstream. The shadow decisions' refusals equal the enforcing
// proxy's 429s (± 5%), and none is left unfinished. Before issue 23 the
// shadow decision was abandoned when the real response ended: of five at
// once against one request a second, the shadow proxy recorded one
// admitted and four unfinished, and never the three refusals.
func TestShadowDecidesAsEnforcementWould(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rpm        int64
		n          int
		every      time.Duration // between arrivals; 0: all at once
		maxWaitFor time.Duration
	}{
		{name: "five at once", rpm: 60, n: 5, maxWaitFor: time.Second},
		{name: "sustained overload", rpm: 240, n: 80, every: 25 * time.Millisecond, maxWaitFor: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := proxyOpts{upstream: statusUpstream(), mutate: func(_ *Config, q *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
				q.Account.RequestsPerMinute = tc.rpm
				q.Classes.Bulk.MaxWait = tc.maxWaitFor
			}}
			enforcing, shadow := newTestProxy(t, opts), newTestProxy(t, opts)
			live := *shadow.handler.live.Load()
			live.Shadow = true
			shadow.handler.Reconfigure(live)

			var wg sync.WaitGroup
			var mu sync.Mutex
			statuses := map[int]int{}
			send := func(url string, record bool) {
				status, _, _ := do(t, newRequest(t, http.MethodPost, url+"/v1/chat/completions", `{"model":"m","messages":[]}`))
				if record {
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}
			}
			tick := time.NewTicker(max(tc.every, time.Millisecond))
			defer tick.Stop()
			for i := range tc.n {
				if tc.every > 0 && i > 0 {
					<-tick.C // the load's shape, not a synchronisation
				}
				wg.Go(func() { send(enforcing.URL, true) })
				wg.Go(func() { send(shadow.URL, false) })
			}
			wg.Wait()

			bulk := map[string]string{"class": "bulk"}
			poll.Until(t, "every shadow decision recorded", func() bool {
				return sumSeries(t, shadow, "meterproxy_shadow_decisions_total", bulk) == float64(tc.n)
			})
			outcome := func(o string) float64 {
				return counterValue(t, shadow.reg, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk", "outcome": o})
			}
			wouldRefuse := outcome(shadowQueueFull) + outcome(shadowMaxWait)
			refused := float64(statuses[http.StatusTooManyRequests])
			t.Logf("enforcing: %v; shadow: admitted %v, held %v, queue_full %v, max_wait %v, unfinished %v",
				statuses, outcome(shadowAdmitted), outcome(shadowHeld), outcome(shadowQueueFull), outcome(shadowMaxWait), outcome(shadowUnfinished))
			if statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != tc.n || refused == 0 {
				t.Fatalf("the enforcing proxy answered %v; want %d answers, 200 or 429, some refused", statuses, tc.n)
			}
			if u := outcome(shadowUnfinished); u != 0 {
				t.Errorf("%v shadow decisions unfinished; only a shutdown leaves one so", u)
			}
			if math.Abs(wouldRefuse-refused) > 0.05*refused {
				t.Errorf("shadow mode would have refused %v, the enforcing proxy refused %v (± 5%%: %s)", wouldRefuse, refused, fmt.Sprint(0.05*refused))
			}
		})
	}
}

// sumSeries sums every series of the family name on p whose labels
// include labels.
func sumSeries(t *testing.T, p *testProxy, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
