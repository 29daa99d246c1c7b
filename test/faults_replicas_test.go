//go:build faults

package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// drainUnderLoad stops p with SIGTERM while n bulk requests are on it (each
// answered by the upstream after latency) — as many in flight as it may
// have, the rest held — and checks the drain: /readyz answered 503 before
// the listener stopped accepting; every one of the n ended 200 (admitted,
// finished within the grace) or 503 shutting_down in JSON, none with a
// transport error, all within the grace; p's counters agree with its
// clients at the end of the drain; p exits 0. A stream held open on p
// (interactive, so apart from the n) keeps the drain, and with it /metrics,
// going until the counters are read.
func drainUnderLoad(t *testing.T, client *http.Client, p *procs.Proxy, n int, latency, grace time.Duration) *tally {
	t.Helper()
	base := mustRead(t, p.AdminURL)
	chat := p.URL + "/v1/chat/completions"
	keepOpen := hold(t, client, chat, chatKey)
	tl := newTally()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	s := shot{url: chat, body: chatBody, headers: map[string]string{"Authorization": "Bearer " + importKey, "X-Fake-Latency": latency.String()}}
	before := scrape(t, p.AdminURL)
	for range n {
		wg.Go(func() {
			tl.record(fire(client, s, nil))
			mu.Lock()
			last = time.Now()
			mu.Unlock()
		})
	}
	var held float64
	waitFor(t, fmt.Sprintf("the replica to have all %d requests", n), func() bool {
		m := scrape(t, p.AdminURL)
		held = m.Sum("meterproxy_queue_depth", map[string]string{"class": "bulk"})
		return arrived(m, before, "bulk") == n
	})
	if held == 0 {
		t.Fatalf("all %d requests were admitted at once: the drain would not show what happens to held ones", n)
	}
	order := make(chan error, 1)
	var readyFirst bool
	go func() {
		var err error
		readyFirst, err = shutdownOrder(p.URL, p.AdminURL)
		order <- err
	}()
	sigterm := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-order; err != nil {
		t.Errorf("watching the shutdown: %v", err)
	} else if !readyFirst {
		t.Error("the listener stopped accepting before /readyz answered 503")
	}
	if took := last.Sub(sigterm); took > grace {
		t.Errorf("the last of the %d requests ended %s after SIGTERM, past the %s grace", n, took, grace)
	}
	fwd, ref, neg := tl.totals()
	if len(tl.problems) > 0 || tl.forwarded["2xx"] != fwd || tl.refused["shutting_down"] != ref || neg != 0 || tl.cancelled != 0 || tl.undelivered != 0 {
		t.Errorf("draining: %s, problems %v; want each admitted (200) or refused 503 shutting_down", tl, tl.problems)
	}
	t.Logf("SIGTERM with %v of %d requests held: %s; the last ended %s after SIGTERM (grace %s)",
		held, n, tl, last.Sub(sigterm).Round(time.Millisecond), grace)
	checkIdentityOf(t, "the draining replica", p.AdminURL, tl, base)
	settle(t, "the draining replica to have only the held-open stream in flight", p.AdminURL, func(r reading) string {
		if r.inFlight != 1 || r.queued != 0 {
			return fmt.Sprintf("in flight %v, queued %v", r.inFlight, r.queued)
		}
		return ""
	})
	if a := keepOpen.release(); a.status != http.StatusOK {
		t.Errorf("the held-open stream ended %d %v", a.status, a.err)
	}
	if err := p.Wait(grace); err != nil {
		t.Errorf("the drained replica: %v, want exit status 0", err)
	}
	checkNoPanics(t, "the drained replica", p)
	return tl
}

// crashHolding fills p (replica id in Redis) with k streams held open, so
// it holds k of the fleet's slots, runs beforeKill, then kills it with
// SIGKILL and returns how long after the kill Redis stopped counting it:
// its heartbeat gone and its in-flight count removed. Two bounds, both on
// Redis's clock: the dead replica's count expires (its heartbeat score)
// within the heartbeat TTL, 3 × heartbeat, of the kill; and a surviving
// replica's next call removes it within two heartbeats of that expiry (a
// replica that knows of the dead one's slots calls at least once a
// heartbeat, quota/loop.go's keepAlive; two leave room for a slow call). The held
// streams break off with the process; their counts died with it.
func crashHolding(t *testing.T, client *http.Client, srv *fleetRedis, p *procs.Proxy, id string, k int, heartbeat time.Duration, beforeKill func()) time.Duration {
	t.Helper()
	holders := make([]*holder, k)
	for i := range holders {
		holders[i] = hold(t, client, p.URL+"/v1/chat/completions", chatKey)
	}
	waitFor(t, "Redis to count the doomed replica's slots", func() bool {
		return srv.inFlight(t)[id+":i"] == fmt.Sprint(k)
	})
	if beforeKill != nil {
		beforeKill()
	}
	redisNow := func() time.Time {
		now, err := srv.c.Time(t.Context()).Result()
		if err != nil {
			t.Fatalf("Redis TIME: %v", err)
		}
		return now
	}
	killedAt := redisNow()
	killed := time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	score, err := srv.c.ZScore(t.Context(), "{"+srv.prefix+"}:heartbeat", id).Result()
	if err != nil {
		t.Fatalf("the killed replica's heartbeat: %v (reclaimed already, or never counted)", err)
	}
	expires := time.UnixMilli(int64(score))
	var reclaimedAt time.Time
	waitFor(t, "Redis to stop counting the killed replica", func() bool {
		m := srv.inFlight(t)
		_, i := m[id+":i"]
		_, b := m[id+":b"]
		if srv.replicaIDs(t)[id] || i || b {
			return false
		}
		reclaimedAt = redisNow()
		return true
	})
	reclaimed := time.Since(killed)
	ttl := 3 * heartbeat
	if d := expires.Sub(killedAt); d > ttl+10*time.Millisecond {
		t.Errorf("the killed replica's count expires %s after the kill, past the heartbeat TTL %s", d, ttl)
	}
	if late := reclaimedAt.Sub(expires); late > 2*heartbeat {
		t.Errorf("the killed replica's %d slots were reclaimed %s after its count expired, want within two heartbeats (%s)", k, late, 2*heartbeat)
	}
	broken := 0
	for _, h := range holders {
		if a := h.release(); a.status == http.StatusOK && a.err != nil && !a.left {
			broken++
		}
	}
	if broken != k {
		t.Errorf("%d of the %d streams on the killed replica broke off with it", broken, k)
	}
	checkNoPanics(t, "the killed replica", p)
	t.Logf("kill -9 of a replica holding %d slots: its count expired %s after the kill (TTL %s), Redis stopped counting it %s later; %s in all; its %d streams broke off with it",
		k, expires.Sub(killedAt).Round(time.Millisecond), ttl, reclaimedAt.Sub(expires).Round(time.Millisecond), reclaimed.Round(time.Millisecond), broken)
	return reclaimed
}

// startDoomed runs a replica the test will kill -9, so its cleanup does not
// expect a clean exit, and returns it with its id in Redis.
func startDoomed(t *testing.T, cfg config, srv *fleetRedis) (*procs.Proxy, string) {
	t.Helper()
	before := srv.replicaIDs(t)
	p := startKillable(t, cfg)
	return p, srv.newReplicaID(t, before)
}

// steadyChat is a loader of plain chat completions, both classes, spread
// over replicas named names, recorded in l as kind "chat".
func steadyChat(client *http.Client, l *ledger, rate int, names []string, replicas []*procs.Proxy) *loader {
	return &loader{client: client, rate: rate, maxConc: 300, next: func(rng *rand.Rand) (shot, *tally) {
		i := rng.IntN(len(replicas))
		key := importKey
		if rng.IntN(2) == 0 {
			key = chatKey
		}
		return shot{url: replicas[i].URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{"Authorization": "Bearer " + key}},
			l.of(names[i], "chat")
	}}
}

// TestFaultSIGTERM: two replicas share one Redis; one carries steady load
// while the other is sent SIGTERM with 150 bulk requests on it, some held.
// /readyz goes false first, every admitted or held request ends within the
// grace with 200 (or a clear 503 shutting_down), the drained replica's
// counters agree with its clients and it exits 0; the survivor's identity
// holds, and the fleet's in-flight count returns to 0.
func TestFaultSIGTERM(t *testing.T) {
	const grace = 10 * time.Second
	srv := ownedRedis(t)
	fake := startFake(t, "-latency", "5ms")
	cfg := srv.config(fake.URL)
	cfg.set("server.shutdown_grace", grace.String())
	cfg.set("account.max_in_flight", 100)
	cfg.set("account.requests_per_minute", 60_000)
	cfg.set("account.expected_replicas", 2)
	cfg.set("classes.bulk.max_wait", "30s")
	survivor := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	victim := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	idle := readIdle(t, survivor.AdminURL)
	client := loadClient(t, 256)
	l := newLedger()
	ld := steadyChat(client, l, 100, []string{"survivor"}, []*procs.Proxy{survivor})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { ld.run(ctx, seeded(t, 3)) })

	drainUnderLoad(t, client, victim, 150, time.Second, grace)
	stop()
	wg.Wait()
	checkRules(t, l, map[string]kindRule{"chat": {forwarded: []string{"2xx"}, must: "2xx"}})
	checkIdentityOf(t, "survivor", survivor.AdminURL, l.proxy("survivor"), idle)
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "survivor", survivor, idle)
}

// TestFaultSIGTERMRefusesHeldPastGrace: SIGTERM to a replica with more held
// requests than it can serve within server.shutdown_grace (5 in flight, 400
// ms each, 40 waiting, grace 1 s). The admitted ones finish; the ones still
// held when the grace runs out must get a clear refusal — 503
// shutting_down in JSON — not a dropped connection.
func TestFaultSIGTERMRefusesHeldPastGrace(t *testing.T) {
	fake := startFake(t, "-latency", "5ms")
	cfg := baseConfig(fake.URL)
	cfg.withCallers()
	cfg.set("server.shutdown_grace", "1s")
	cfg.set("account.max_in_flight", 5)
	cfg.set("classes.bulk.max_wait", "30s")
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := loadClient(t, 64)
	const n = 40
	tl := newTally()
	var wg sync.WaitGroup
	s := shot{url: p.URL + "/v1/chat/completions", body: chatBody, headers: map[string]string{"Authorization": "Bearer " + importKey, "X-Fake-Latency": "400ms"}}
	before := scrape(t, p.AdminURL)
	for range n {
		wg.Go(func() { tl.record(fire(client, s, nil)) })
	}
	waitFor(t, "the replica to have all 40 requests, most of them held", func() bool {
		m := scrape(t, p.AdminURL)
		return arrived(m, before, "bulk") == n && m.Sum("meterproxy_queue_depth", nil) >= n-10
	})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("SIGTERM, grace 1 s, 5 in flight and 35 held: %s", tl)
	checkNoPanics(t, "the drained replica", p)
	if tl.forwarded["2xx"] < 5 {
		t.Errorf("only %d requests finished: the admitted ones must complete within the grace", tl.forwarded["2xx"])
	}
	if len(tl.problems) > 0 || tl.forwarded["2xx"]+tl.refused["shutting_down"] != n {
		t.Errorf("%d of %d requests ended neither 200 nor 503 shutting_down: %v", n-tl.forwarded["2xx"]-tl.refused["shutting_down"], n, tl.problems)
	}
}

// TestFaultKill9: two replicas share one Redis and a fleet bound of 8. The
// doomed one holds all 8 slots with open streams while the survivor's
// steady load queues behind them; kill -9 the doomed one. Redis stops
// counting it within its heartbeat TTL (3 × store.heartbeat), the
// survivor's queued requests are admitted, every one of them is forwarded,
// its identity holds and the fleet's count returns to 0.
func TestFaultKill9(t *testing.T) {
	const heartbeat = 500 * time.Millisecond
	srv := ownedRedis(t)
	fake := startFake(t, "-latency", "5ms")
	cfg := srv.config(fake.URL)
	cfg.set("store.heartbeat", heartbeat.String())
	cfg.set("account.max_in_flight", 8)
	cfg.set("classes.interactive.max_wait", "20s")
	cfg.set("classes.bulk.max_wait", "20s")
	survivor := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	srv.newReplicaID(t, nil)
	doomed, id := startDoomed(t, cfg, srv)
	idle := readIdle(t, survivor.AdminURL)
	client := loadClient(t, 256)
	l := newLedger()
	ld := steadyChat(client, l, 50, []string{"survivor"}, []*procs.Proxy{survivor})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	crashHolding(t, client, srv, doomed, id, 8, heartbeat, func() {
		// The doomed replica holds the whole fleet: the survivor's load queues.
		wg.Go(func() { ld.run(ctx, seeded(t, 9)) })
		waitFor(t, "the survivor to queue requests behind the full fleet", func() bool {
			return mustRead(t, survivor.AdminURL).queued >= 20
		})
	})
	n := ld.sent.Load()
	waitFor(t, "the survivor's load to go on after the reclaim", func() bool { return ld.sent.Load() >= n+100 })
	stop()
	wg.Wait()
	checkRules(t, l, map[string]kindRule{"chat": {forwarded: []string{"2xx"}, must: "2xx"}})
	checkIdentityOf(t, "survivor", survivor.AdminURL, l.proxy("survivor"), idle)
	client.CloseIdleConnections()
	fake.stop(t)
	checkIdle(t, "survivor", survivor, idle)
}
