//go:build faults

package test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// redisFaults runs the three Redis faults in turn under whatever load the
// caller drives, and returns once every replica is back on Redis: killed
// (the replicas degrade to their local limits; stays down while the load
// sends another perFault requests), restarted empty, paused for 2 s with
// CLIENT PAUSE, and restarted empty again while the replicas were healthy
// (no keys, no scripts: the replicas reload the script and reassert their
// in-flight counts). sent reports how many requests the load has sent so
// far, to wait for traffic through each fault without sleeping.
func redisFaults(t *testing.T, srv *fleetRedis, replicas []*procs.Proxy, sent func() int64, perFault int64) {
	t.Helper()
	degraded := func(p *procs.Proxy) bool { return mustRead(t, p.AdminURL).degraded == 1 }
	healthy := func(p *procs.Proxy) bool { return !degraded(p) }
	waitAll := func(what string, cond func(*procs.Proxy) bool) {
		t.Helper()
		for _, p := range replicas {
			waitFor(t, what, func() bool { return cond(p) })
		}
	}
	through := func(what string) {
		t.Helper()
		n := sent()
		waitFor(t, what, func() bool { return sent() >= n+perFault })
	}

	srv.Kill(t)
	waitAll("every replica degraded after Redis was killed", degraded)
	through("requests while Redis is down")
	srv.Restart(t)
	waitAll("every replica back on Redis after the restart", healthy)
	through("requests after the restart")

	srv.Pause(t, 2*time.Second)
	waitAll("every replica degraded during CLIENT PAUSE", degraded)
	waitAll("every replica back on Redis after the pause", healthy)
	through("requests after the pause")

	srv.Restart(t) // while healthy: keys and scripts gone at once
	through("requests after Redis restarted empty")
	waitAll("every replica on Redis after it restarted empty", healthy)
	through("requests on the repopulated Redis")
}

// TestFaultRedis: two replicas share one Redis under a steady load of 300
// requests a second (both classes, some streamed) while Redis is killed and
// restarted, paused for 2 s, and restarted empty. Under store.on_error
// local no caller sees a 5xx or a transport error; every request is
// forwarded or refused for capacity in JSON; each replica's counters agree
// with its clients; Redis's in-flight totals, both replicas' in-flight
// gauges and the fleet gauges return to 0; the keys Redis holds again all
// carry a TTL; goroutines return to idle.
func TestFaultRedis(t *testing.T) {
	srv := ownedRedis(t)
	fake := startFake(t, "-latency", "5ms", "-chunk-interval", "2ms")
	cfg := srv.config(fake.URL)
	cfg.set("store.timeout", "100ms")
	cfg.set("account.requests_per_minute", 30_000) // 500 a second for the fleet, 250 per replica degraded
	cfg.set("account.expected_replicas", 2)
	names := []string{"a", "b"}
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	idle := []reading{readIdle(t, replicas[0].AdminURL), readIdle(t, replicas[1].AdminURL)}

	client := loadClient(t, 256)
	l := newLedger()
	ld := &loader{client: client, rate: 300, maxConc: 200, next: func(rng *rand.Rand) (shot, *tally) {
		i := rng.IntN(len(replicas))
		key := importKey
		if rng.IntN(10) < 3 {
			key = chatKey
		}
		s := shot{url: replicas[i].URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{"Authorization": "Bearer " + key}}
		kind := "chat"
		if rng.IntN(10) == 0 {
			s.body, kind = streamBody, "stream"
		}
		return s, l.of(names[i], kind)
	}}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { ld.run(ctx, seeded(t, 1)) })
	start := time.Now()
	redisFaults(t, srv, replicas, ld.sent.Load, 300)
	stop()
	wg.Wait()
	t.Logf("%d requests sent in %s (%d skipped: all %d clients busy)", ld.sent.Load(), time.Since(start).Round(time.Millisecond), ld.skipped.Load(), ld.maxConc)

	checkRules(t, l, map[string]kindRule{
		"chat":   {forwarded: []string{"2xx"}, must: "2xx"},
		"stream": {forwarded: []string{"2xx"}, must: "2xx"},
	})
	for i, p := range replicas {
		checkIdentityOf(t, "replica "+names[i], p.AdminURL, l.proxy(names[i]), idle[i])
	}
	srv.waitEmpty(t)
	checkKeyHygiene(t, srv.Server, srv.prefix)
	if n := srv.CommandStats(t)["evalsha"]; n == 0 {
		t.Error("the restarted Redis ran no EVALSHA: the replicas did not reload the script")
	}
	client.CloseIdleConnections()
	fake.stop(t)
	for i, p := range replicas {
		r := checkIdle(t, "replica "+names[i], p, idle[i])
		if r.degraded != 0 {
			t.Errorf("replica %s still degraded at the end", names[i])
		}
		m := scrape(t, p.AdminURL)
		t.Logf("replica %s: %v failed Redis calls (probes included)", names[i], m.Sum("meterproxy_store_errors_total", nil))
	}
}
