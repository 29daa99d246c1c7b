package test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// fleetConfig is one replica's config in a fleet sharing srv under prefix.
func fleetConfig(upstreamURL string, srv *redistest.Server, prefix string) config {
	cfg := baseConfig(upstreamURL)
	cfg.set("log.level", "info")
	cfg.set("store.redis_url", srv.URL())
	cfg.set("store.key_prefix", prefix)
	cfg.set("store.timeout", "200ms") // the race detector and 2 cores slow every call
	cfg.set("store.heartbeat", "500ms")
	cfg.withCallers()
	return cfg
}

var fleetEnv = []string{"CHAT_KEY=" + chatKey, "IMPORT_KEY=" + importKey}

// TestFleetSharesOneQuota: three replicas, one Redis, a bulk flood through
// all three beside steady interactive traffic for 8 seconds. The upstream
// never sees more than the account's allowance in a second, never answers
// 429, interactive is always admitted, and bulk uses what interactive
// leaves, up to the reserve.
func TestFleetSharesOneQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("8 s fleet run; skipped with -short")
	}
	const (
		rpm        = 1200 // 20 a second for the fleet
		perSecond  = rpm / 60
		reserve    = 6 // 0.3 of 20
		chatRate   = 6 // interactive a second, = the reserve: bulk may borrow all the rest
		runFor     = 8 * time.Second
		perReplica = 15 // bulk workers per replica
	)
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	fake := fakeprovider.New(fakeprovider.Config{RPM: rpm, Latency: 20 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := fleetConfig(up.URL, srv, prefix)
	cfg.set("account.requests_per_minute", rpm)
	cfg.set("account.expected_replicas", 3)
	cfg.set("classes.interactive.max_wait", "2s")
	cfg.set("classes.bulk.max_wait", "3s")
	cfg.set("store.timeout", "1s") // this test is about sharing, not Redis faults: never degrade on a slow machine
	replicas := make([]*procs.Proxy, 3)
	for i := range replicas {
		replicas[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey)
	}
	client := newClient(t, 128)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	out := newOutcomes()
	send := func(p *procs.Proxy, class, key string) {
		status, _, b := post(t, client, p.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key})
		out.record(class, status, b, nil)
	}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(runFor)
	for _, p := range replicas {
		for range perReplica {
			wg.Go(func() {
				for time.Now().Before(stop) {
					send(p, "bulk", importKey)
				}
			})
		}
	}
	tick := time.NewTicker(time.Second / chatRate)
	for n := 0; time.Now().Before(stop); n++ {
		<-tick.C
		p := replicas[n%len(replicas)]
		wg.Go(func() { send(p, "interactive", chatKey) })
	}
	tick.Stop()
	wg.Wait()

	if len(out.refused["interactive"]) != 0 || out.ok["interactive"] == 0 {
		t.Errorf("interactive: %d admitted, refusals %v; want all admitted", out.ok["interactive"], out.refused["interactive"])
	}
	if len(out.other) > 0 {
		t.Errorf("unexpected answers: %v", out.other)
	}
	for _, p := range replicas {
		if n := sum(scrape(t, p.AdminURL), "meterproxy_store_errors_total", nil); n != 0 {
			t.Fatalf("a replica's Redis calls failed %v times: the run fell back to per-replica limits and says nothing about the fleet", n)
		}
	}
	checkArrivals(t, fake.Arrivals(), perSecond)
	if st := fake.Stats(); st.RateLimited != 0 {
		t.Errorf("the upstream refused %d requests: the fleet let through more than the account", st.RateLimited)
	}
	checkBorrowing(t, fake.Requests(), start.Unix()+1, stop.Unix()-1, perSecond-reserve)
	checkKeyHygiene(t, srv, prefix)
}

// checkBorrowing: in each full second of the run, bulk took at least 90% of
// what interactive left unused, up to the reserve.
func checkBorrowing(t *testing.T, reqs []fakeprovider.Request, from, to int64, bulkMax int) {
	t.Helper()
	bulk, inter := map[int64]int{}, map[int64]int{}
	for _, r := range reqs {
		s := r.Arrived.Unix()
		if r.Header.Get("Authorization") == "Bearer "+importKey {
			bulk[s]++
		} else {
			inter[s]++
		}
	}
	var used, avail int
	for s := from; s <= to; s++ {
		used += bulk[s]
		avail += bulkMax
	}
	if used*10 < avail*9 {
		t.Errorf("bulk took %d of the %d the reserve leaves over %d s (%.0f%%), want >= 90%%", used, avail, to-from+1, 100*float64(used)/float64(avail))
	}
	t.Logf("bulk took %d of %d available (%.0f%%); interactive per second %v", used, avail, 100*float64(used)/float64(avail), inter)
}

// checkKeyHygiene: every key under prefix has a TTL, and there are no more
// than the store's five, however many requests went through.
func checkKeyHygiene(t *testing.T, srv *redistest.Server, prefix string) {
	t.Helper()
	c := srv.Client(t)
	keys, err := c.Keys(t.Context(), "{"+prefix+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	t.Logf("keys in Redis after the run: %v", keys)
	if len(keys) == 0 || len(keys) > 5 {
		t.Errorf("keys %v, want between 1 and 5 (window, in flight, heartbeat, starved, upstream)", keys)
	}
	for _, k := range keys {
		if ttl := c.PTTL(t.Context(), k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL", k)
		}
	}
}

// TestFleetReclaimsACrashedReplica: kill -9 a replica holding every slot
// of the fleet; once its heartbeat expires the others admit up to the full
// bound.
func TestFleetReclaimsACrashedReplica(t *testing.T) {
	const bound = 4
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	g := &holdGate{arrived: make(chan struct{}, 16), next: fakeprovider.New(fakeprovider.Config{})}
	up := startUpstream(t, g)
	cfg := fleetConfig(up.URL, srv, prefix)
	cfg.set("account.max_in_flight", bound)
	cfg.set("classes.interactive.max_wait", "20s")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	doomed, err := procs.StartProxy(ctx, meterproxyBin, cfg.write(t), fleetEnv)
	if err != nil {
		t.Fatal(err)
	}
	survivor := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 2*bound)
	// Interactive: it may take every slot of the fleet (bulk never takes the reserve).
	gated := map[string]string{"Authorization": "Bearer " + chatKey}
	for range bound { // the doomed replica takes every slot of the fleet, and holds them
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, doomed.URL+"/v1/held", nil)
			req.Header.Set("Authorization", gated["Authorization"])
			if res, err := client.Do(req); err == nil {
				_ = res.Body.Close()
			}
		}()
		select {
		case <-g.arrived:
		case <-ctx.Done():
			t.Fatal("the doomed replica never filled the fleet")
		}
	}
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for range bound { // the survivor's requests wait: the fleet is full
		wg.Go(func() {
			status, _, _ := post(t, client, survivor.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, gated)
			if status == http.StatusOK {
				admitted.Add(1)
			}
		})
	}
	waitFor(t, "the survivor to hold its requests", func() bool {
		return sum(scrape(t, survivor.AdminURL), "meterproxy_queue_depth", map[string]string{"class": "interactive"}) == bound
	})
	killed := time.Now()
	if err := doomed.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-doomed.Exited()
	wg.Wait()
	t.Logf("the crashed replica's %d slots were reclaimed %s after kill -9 (heartbeat 500ms, TTL 1.5s)", bound, time.Since(killed).Round(10*time.Millisecond))
	if admitted.Load() != bound {
		t.Errorf("the survivor got %d of %d admitted after the crash", admitted.Load(), bound)
	}
	waitFor(t, "the fleet count to return to 0", func() bool {
		return sum(scrape(t, survivor.AdminURL), "meterproxy_fleet_in_flight", nil) == 0
	})
}

// holdGate holds /v1/held requests until their client goes away.
type holdGate struct {
	arrived chan struct{}
	next    http.Handler
}

func (g *holdGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/held" {
		g.arrived <- struct{}{}
		<-r.Context().Done()
		return
	}
	g.next.ServeHTTP(w, r)
}

// TestFleetSurvivesRedisFaults: Redis killed, paused, restarted empty and
// its scripts flushed under load. Under on_error local no caller sees a
// 5xx; the store reports degraded and recovers. Under closed, 503 in JSON.
func TestFleetSurvivesRedisFaults(t *testing.T) {
	srv := redistest.Start(t)
	if !srv.Owned() {
		t.Skip("kills and pauses redis-server: needs one of its own, not REDIS_URL")
	}
	prefix := redistest.Prefix(t)
	fake := fakeprovider.New(fakeprovider.Config{Latency: 5 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := fleetConfig(up.URL, srv, prefix)
	cfg.set("store.timeout", "100ms")
	local := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	cfg.set("store.on_error", "closed")
	closed := startProxy(t, cfg, fleetEnv, chatKey, importKey)

	client := newClient(t, 32)
	body := `{"model":"m","messages":[]}`
	var fives atomic.Int64
	var sent atomic.Int64
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range local {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stopLoad:
						return
					default:
					}
					status, _, _ := post(t, client, p.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + importKey})
					sent.Add(1)
					if status >= 500 {
						fives.Add(1)
					}
				}
			})
		}
	}
	degraded := func(p *procs.Proxy) bool { return sum(scrape(t, p.AdminURL), "meterproxy_store_degraded", nil) == 1 }
	healthy := func(p *procs.Proxy) bool { return !degraded(p) }
	waitAll := func(what string, cond func(*procs.Proxy) bool) {
		for _, p := range local {
			waitFor(t, what, func() bool { return cond(p) })
		}
	}

	srv.Kill(t)
	waitAll("degraded after kill", degraded)
	status, _, b := post(t, client, closed.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + chatKey})
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if status != http.StatusServiceUnavailable || json.Unmarshal(b, &e) != nil || e.Error.Code != "store_unavailable" {
		t.Errorf("on_error closed, Redis down: %d %s, want 503 store_unavailable", status, b)
	}
	srv.Restart(t) // empty: no keys, no scripts
	waitAll("recovery after restart", healthy)
	srv.Pause(t, 1500*time.Millisecond)
	waitAll("degraded during CLIENT PAUSE", degraded)
	waitAll("recovery after the pause", healthy)
	before := sum(scrape(t, local[0].AdminURL), "meterproxy_store_errors_total", nil)
	if err := srv.Client(t).ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	n := sent.Load()
	waitFor(t, "requests after SCRIPT FLUSH", func() bool { return sent.Load() > n+50 })
	if after := sum(scrape(t, local[0].AdminURL), "meterproxy_store_errors_total", nil); after != before {
		t.Errorf("SCRIPT FLUSH cost %v store errors, want a silent reload", after-before)
	}
	close(stopLoad)
	wg.Wait()
	if fives.Load() != 0 {
		t.Errorf("%d of %d requests got a 5xx under on_error local", fives.Load(), sent.Load())
	}
	t.Logf("%d requests through Redis kill, restart, pause and SCRIPT FLUSH; %d 5xx", sent.Load(), fives.Load())
}
