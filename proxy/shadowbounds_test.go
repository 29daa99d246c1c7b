package proxy

import (
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// shadowProxy is a proxy in mode: shadow in front of usageUpstream, its
// account allowed one request a second, bulk's max_wait maxWait and its
// budget $1 a day, gpt-4o priced; callers send bulk as "import"
// (sk-import).
func shadowProxy(t *testing.T, maxWait time.Duration) *testProxy {
	t.Helper()
	p := newTestProxy(t, proxyOpts{upstream: usageUpstream(), environ: map[string]string{"IMPORT": "sk-import"},
		mutate: func(_ *Config, q *quota.Config, _ *classify.Config, callers *[]classify.Caller) {
			q.Account.RequestsPerMinute = 60
			q.Classes.Bulk.MaxWait = maxWait
			q.Classes.Bulk.Budget = classify.Budget{USD: 1, Per: classify.PerDay}
			q.Prices = []price.Price{{Match: []string{"gpt-4o"}, Input: 2.5, Output: 10}}
			*callers = []classify.Caller{{Name: "import", KeyEnv: "IMPORT", Class: classify.Bulk}}
		}})
	live := *p.handler.live.Load()
	live.Shadow = true
	p.handler.Reconfigure(live)
	return p
}

// flood sends n bulk requests at once and fails unless every one is
// answered 200 (mode: shadow forwards them all).
func (p *testProxy) flood(t *testing.T, n int) {
	t.Helper()
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Go(func() {
			statuses[i], _ = p.send(t, http.MethodPost, "/v1/chat/completions", "sk-import", `{"model":"gpt-4o","max_tokens":100,"messages":[]}`)
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Fatalf("request %d: %d in mode shadow, want 200", i, s)
		}
	}
}

// TestShadowHoldsNoReservation (issue 37 item 1): a flood in mode shadow
// leaves nothing behind once its simulated waits end at max_wait: the
// simulated queue empty, no slot held, no budget reservation held at any
// time — the simulated decisions reserve nothing — and the budget spent
// what the forwarded requests really spent, every one of them, as
// meterproxy_spend_usd_total counts it. Before, simulated waiters held
// their worst case reserved and only the granted ones were charged: of
// 30 requests at one a second, two or three.
func TestShadowHoldsNoReservation(t *testing.T) {
	const n = 30
	p := shadowProxy(t, 2*time.Second)
	p.flood(t, n)

	bulk := map[string]string{"class": "bulk"}
	reserved := 0.0
	waitFor(t, "every shadow decision recorded", func() bool {
		reserved = max(reserved, p.budgetState(t, "class:bulk").Reserved)
		return sumSeries(t, p, "meterproxy_shadow_decisions_total", bulk) == n
	})
	waitFor(t, "the simulated queue and slots empty", func() bool {
		reserved = max(reserved, p.budgetState(t, "class:bulk").Reserved)
		return sumSeries(t, p, "meterproxy_queue_depth", bulk) == 0 && sumSeries(t, p, "meterproxy_in_flight", bulk) == 0
	})
	if reserved != 0 {
		t.Errorf("the bulk budget showed $%v reserved in mode shadow; simulated decisions must reserve nothing", reserved)
	}
	if w := sumSeries(t, p, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk", "outcome": shadowMaxWait}); w == 0 {
		t.Errorf("no simulated wait ended at max_wait; the load should have made some (30 at one a second, max_wait 2s)")
	}
	spent := sumSeries(t, p, "meterproxy_spend_usd_total", map[string]string{"caller": "import"})
	if want := n * (10*2.5 + 5*10) / 1e6; math.Abs(spent-want) > 1e-9 {
		t.Fatalf("meterproxy_spend_usd_total = %v, want %v (30 answers of 10 in, 5 out)", spent, want)
	}
	waitFor(t, "the budget charged what was really spent", func() bool {
		st := p.budgetState(t, "class:bulk")
		return math.Abs(st.Spent-spent) < 1e-9 && st.Reserved == 0
	})
}

// TestShadowDroppedOnReloadToEnforce (issue 37 item 1): the reload from
// shadow to enforce drops the simulated decisions under way — their
// waits leave the queue (recorded unfinished), their slots are freed —
// so nothing simulated stands before the requests enforcement admits;
// the queue and in-flight gauges say which mode they count. Before, the
// simulated waiters stayed queued until their max_wait (a minute here)
// and real bulk queued behind them.
func TestShadowDroppedOnReloadToEnforce(t *testing.T) {
	const n = 20
	p := shadowProxy(t, time.Minute)
	p.flood(t, n)
	shadowBulk := map[string]string{"class": "bulk", "mode": modeShadow}
	waitFor(t, "simulated waits queued", func() bool { return sumSeries(t, p, "meterproxy_queue_depth", shadowBulk) >= n/2 })

	live := *p.handler.live.Load()
	live.Shadow = false
	p.handler.Reconfigure(live)

	bulk := map[string]string{"class": "bulk"}
	waitFor(t, "the simulated decisions dropped", func() bool {
		return sumSeries(t, p, "meterproxy_queue_depth", bulk) == 0 && sumSeries(t, p, "meterproxy_in_flight", bulk) == 0
	})
	if s := sumSeries(t, p, "meterproxy_queue_depth", map[string]string{"mode": modeShadow}) + sumSeries(t, p, "meterproxy_in_flight", map[string]string{"mode": modeShadow}); s != 0 {
		t.Errorf("%v still counted under mode=shadow after the reload to enforce", s)
	}
	waitFor(t, "every shadow decision recorded", func() bool { return sumSeries(t, p, "meterproxy_shadow_decisions_total", bulk) == n })
	if u := sumSeries(t, p, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk", "outcome": shadowUnfinished}); u < n/2 {
		t.Errorf("%v shadow decisions unfinished, want the %d or more dropped from the queue", u, n/2)
	}

	// Real bulk now: admitted at the account's rate, behind nothing
	// simulated. The window's request may be spent this second.
	status, body := p.send(t, http.MethodPost, "/v1/chat/completions", "sk-import", `{"model":"gpt-4o","max_tokens":100,"messages":[]}`)
	if status != http.StatusOK {
		t.Fatalf("a bulk request after the reload to enforce: %d %s", status, body)
	}
	if q := sumSeries(t, p, "meterproxy_admissions_total", map[string]string{"class": "bulk"}); q != 1 {
		t.Errorf("meterproxy_admissions_total{class=bulk} = %v, want the one enforced request", q)
	}
	if sumSeries(t, p, "meterproxy_in_flight", map[string]string{"mode": modeEnforce}) != 0 || findSeries(t, p.reg, "meterproxy_queue_depth", map[string]string{"mode": modeEnforce}) == nil {
		t.Errorf("the gauges do not count under mode=enforce after the reload")
	}
}
