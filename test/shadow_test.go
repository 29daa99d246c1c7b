package test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestShadowModeOnTheFleet: two replicas on one Redis in mode: shadow, an
// account of one request a second and a queue of two. Every request is
// forwarded at once; the metrics record what enforcement would have done.
func TestShadowModeOnTheFleet(t *testing.T) {
	t.Parallel()
	const n = 12 // per replica
	srv := redistest.Start(t)
	fake := fakeprovider.New(fakeprovider.Config{})
	up := startUpstream(t, fake)
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("mode", "shadow")
	cfg.set("account.requests_per_minute", 60)
	cfg.set("classes.bulk.max_queue", 2)
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, importKey), startProxy(t, cfg, fleetEnv, importKey)}
	client := newClient(t, 2*n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for _, p := range replicas {
		for range n {
			wg.Go(func() {
				status, _, _ := post(t, client, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`,
					map[string]string{"Authorization": "Bearer " + importKey})
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if statuses[http.StatusOK] != 2*n || fake.Stats().Served != 2*n {
		t.Fatalf("answers %v, upstream served %d; want all %d forwarded at once", statuses, fake.Stats().Served, 2*n)
	}
	// A decision runs to its end after the response: one that would have
	// waited is recorded when its wait would have ended.
	var decided, wouldRefuse float64
	poll.Until(t, "every shadow decision recorded", func() bool {
		decided, wouldRefuse = 0, 0
		for _, p := range replicas {
			m := scrape(t, p.AdminURL)
			decided += sum(m, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk"})
			wouldRefuse += sum(m, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk", "outcome": "queue_full"}) +
				sum(m, "meterproxy_shadow_decisions_total", map[string]string{"class": "bulk", "outcome": "max_wait_exceeded"})
			if held := sum(m, "meterproxy_admissions_total", nil); held != 0 {
				t.Errorf("shadow mode counted %v real admission decisions", held)
			}
		}
		return decided >= 2*n
	})
	for _, p := range replicas {
		if u := sum(scrape(t, p.AdminURL), "meterproxy_shadow_decisions_total", map[string]string{"outcome": "unfinished"}); u != 0 {
			t.Errorf("%v shadow decisions unfinished on %s; only a shutdown leaves one so", u, p.URL)
		}
	}
	if decided != 2*n {
		t.Errorf("%v shadow decisions recorded, want one per request (%d)", decided, 2*n)
	}
	if wouldRefuse == 0 {
		t.Error("no request would have been refused, yet the account admits 1 a second and queues 2 per replica")
	}
	t.Logf("answers %v; shadow decisions %v, of which would-refuse (queue full or max_wait) %v", statuses, decided, wouldRefuse)
}
