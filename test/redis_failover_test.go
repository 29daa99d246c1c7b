package test

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// The fleet through a Redis failover: three replicas share one quota on a
// replicated Redis (Cluster or Sentinel) under a closed-loop load while the
// master holding the quota's keys is killed with SIGKILL and a replica is
// promoted. What every such test checks, whatever the topology:
//
//   - each replica degrades to its local limits and comes back to Redis
//     within failoverBound of the kill (the seconds degraded are logged);
//   - outside the seconds from the kill to the last replica's return, no
//     second sees more than the account's allowance at the upstream;
//   - after the return, the replicas admit through Redis again: no store
//     error, and the upstream keeps serving;
//   - the accounting identity: every request the clients sent got exactly
//     one answer (200 or a 429 for capacity, never a 5xx nor a broken
//     connection), the replicas' meterproxy_requests_total agree with the
//     clients, the upstream served exactly the 200s, and nothing is left in
//     flight or queued, in the replicas or in Redis's in-flight hash on the
//     new master.

const (
	failoverRPM       = 1200 // 20 a second for the fleet
	failoverPerSecond = failoverRPM / 60
	// failoverWorkers is how many clients each replica has, half
	// interactive, half bulk; each sends its next request when the last
	// is answered, so together they ask for more than the allowance.
	failoverWorkers = 6
	// failoverBound is how long after the kill every replica must be back
	// on Redis: the topology takes a few seconds to promote a replica
	// (node timeout 1 s, then the vote), the replicas' probe runs every
	// 250 ms.
	failoverBound = 15 * time.Second
	// degradedEvery is how often the replicas' degraded gauge is sampled.
	degradedEvery = 50 * time.Millisecond
)

// redisFailover is a replicated Redis the test can fail over.
type redisFailover struct {
	// name says which topology, for the logs.
	name string
	// url is store.redis_url.
	url string
	// kill SIGKILLs the master of the fleet's keys and returns its
	// address.
	kill func(t *testing.T) string
	// promoted waits until Redis serves the fleet's keys from a master
	// other than old and returns its address.
	promoted func(t *testing.T, old string) string
}

// failoverConfig is a replica's config for the failover tests: fleet limits
// of failoverRPM for failoverReplicas replicas, on_error local, a store
// timeout that the race detector on two cores does not trip.
func failoverConfig(upstreamURL, redisURL, prefix string) config {
	cfg := baseConfig(upstreamURL)
	cfg.set("log.level", "info")
	cfg.set("store.redis_url", redisURL)
	cfg.set("store.key_prefix", prefix)
	cfg.set("store.on_error", "local")
	cfg.set("store.timeout", "200ms")
	cfg.set("store.heartbeat", "500ms")
	cfg.set("account.requests_per_minute", failoverRPM)
	cfg.set("account.expected_replicas", 3)
	cfg.set("classes.interactive.max_wait", "2s")
	cfg.set("classes.bulk.max_wait", "2s")
	cfg.withCallers()
	return cfg
}

// testFleetThroughFailover runs the load, the kill and every check above
// against f, for the fleet's keys under prefix.
func testFleetThroughFailover(t *testing.T, f redisFailover, prefix string) {
	t.Helper()
	fake := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := failoverConfig(up.URL, f.url, prefix)
	replicas := make([]*procs.Proxy, 3)
	for i := range replicas {
		replicas[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey)
	}
	for i, p := range replicas {
		if degraded(t, p) {
			t.Fatalf("replica %d starts degraded: %s is not reachable", i, f.name)
		}
	}

	client := newClient(t, len(replicas)*failoverWorkers)
	out := newOutcomes()
	var stop atomic.Bool
	var wg sync.WaitGroup
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, p := range replicas {
		for w := range failoverWorkers {
			class, key := "interactive", chatKey
			if w%2 == 1 {
				class, key = "bulk", importKey
			}
			wg.Go(func() {
				for !stop.Load() {
					status, _, b, err := postFull(t, client, p.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key})
					if err != nil {
						t.Errorf("%s request: %v", class, err)
						return
					}
					out.record(class, status, b, nil)
				}
			})
		}
	}
	stopLoad := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopLoad() // on a Fatal below; stopping twice is harmless
	waitFor(t, "two seconds' worth of traffic through Redis", func() bool {
		return fake.Stats().Served >= 2*failoverPerSecond
	})

	watch := watchDegraded(t, replicas)
	defer watch.stop()
	errsBefore := storeErrors(t, replicas)
	killed := time.Now()
	old := f.kill(t)
	next := f.promoted(t, old)
	promoted := time.Since(killed)
	t.Logf("%s: killed the master %s; %s promoted %s after the kill", f.name, old, next, promoted.Round(10*time.Millisecond))
	for i, p := range replicas {
		waitFor(t, fmt.Sprintf("replica %d back on Redis", i), func() bool { return !degraded(t, p) })
	}
	back := time.Now()
	if since := back.Sub(killed); since > failoverBound {
		t.Errorf("the last replica came back to Redis %s after the kill, want within %s", since.Round(10*time.Millisecond), failoverBound)
	}
	errsAfter := storeErrors(t, replicas)
	served := fake.Stats().Served
	waitFor(t, "three more seconds' worth of traffic through Redis", func() bool {
		return fake.Stats().Served >= served+3*failoverPerSecond
	})
	stopLoad()
	spans := watch.stop()

	for i, s := range spans {
		t.Logf("%s: replica %d degraded %.2f s in %d span(s) %v; back %.2f s after the kill",
			f.name, i, s.total().Seconds(), len(s), s, s.end(killed).Seconds())
		if len(s) == 0 && errsAfter[i] == errsBefore[i] {
			t.Errorf("replica %d never failed a call nor degraded: the master it used was not the one killed", i)
		}
	}
	for i, p := range replicas {
		if degraded(t, p) {
			t.Errorf("replica %d degraded again after it came back to Redis", i)
		}
		if n := storeErrors(t, replicas)[i]; n != errsAfter[i] {
			t.Errorf("replica %d: %v failed Redis calls after it came back to Redis: it is not admitting through Redis", i, n-errsAfter[i])
		}
	}
	if len(out.other) > 0 {
		t.Errorf("answers other than 200 and 429: %v", out.other)
	}
	for class, codes := range out.refused {
		for code := range codes {
			if code != "max_wait_exceeded" && code != "queue_full" {
				t.Errorf("%s refused with %q (%d times), want only for capacity", class, code, codes[code])
			}
		}
	}
	checkArrivalsOutside(t, fake.Arrivals(), killed.Unix(), back.Unix()+1)
	checkFleetIdentity(t, replicas, out, fake.Stats().Served)
	checkRedisEmpty(t, next, prefix)
}

// degraded reads a replica's meterproxy_store_degraded.
func degraded(t *testing.T, p *procs.Proxy) bool {
	return sum(scrape(t, p.AdminURL), "meterproxy_store_degraded", nil) == 1
}

// storeErrors reads each replica's meterproxy_store_errors_total.
func storeErrors(t *testing.T, replicas []*procs.Proxy) []float64 {
	out := make([]float64, len(replicas))
	for i, p := range replicas {
		out[i] = sum(scrape(t, p.AdminURL), "meterproxy_store_errors_total", nil)
	}
	return out
}

// span is an interval a replica was seen degraded, from the first sample
// that saw it to the first that did not.
type span struct{ from, to time.Time }

// spans are a replica's degraded intervals in order.
type spans []span

func (s spans) total() time.Duration {
	var d time.Duration
	for _, x := range s {
		d += x.to.Sub(x.from)
	}
	return d
}

// end is how long after t0 the last span ended (0 if there was none).
func (s spans) end(t0 time.Time) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].to.Sub(t0)
}

func (s spans) String() string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s+%.2fs", x.from.Format("15:04:05.00"), x.to.Sub(x.from).Seconds())
	}
	return out + "]"
}

// degradedWatch samples every replica's degraded gauge until stopped.
type degradedWatch struct {
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	spans []spans
}

// watchDegraded samples the replicas every degradedEvery on a goroutine of
// its own until stop.
func watchDegraded(t *testing.T, replicas []*procs.Proxy) *degradedWatch {
	w := &degradedWatch{done: make(chan struct{}), spans: make([]spans, len(replicas))}
	w.wg.Go(func() {
		open := make([]time.Time, len(replicas))
		tick := time.NewTicker(degradedEvery)
		defer tick.Stop()
		for {
			for i, p := range replicas {
				m, err := procs.Scrape(t.Context(), p.AdminURL)
				if err != nil {
					t.Errorf("scrape replica %d: %v", i, err)
					return
				}
				now := time.Now()
				switch on := m.Sum("meterproxy_store_degraded", nil) == 1; {
				case on && open[i].IsZero():
					open[i] = now
				case !on && !open[i].IsZero():
					w.spans[i] = append(w.spans[i], span{open[i], now})
					open[i] = time.Time{}
				}
			}
			select {
			case <-w.done:
				for i, o := range open {
					if !o.IsZero() {
						w.spans[i] = append(w.spans[i], span{o, time.Now()})
					}
				}
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// stop ends the sampling and returns each replica's degraded spans.
func (w *degradedWatch) stop() []spans {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
	return w.spans
}

// checkArrivalsOutside is checkArrivals for the seconds before from and
// after to: no second sees more at the upstream than arrivalsAllowed. The
// seconds from..to are only logged.
func checkArrivalsOutside(t *testing.T, arrivals map[int64]int, from, to int64) {
	t.Helper()
	secs := make([]int64, 0, len(arrivals))
	for s := range arrivals {
		secs = append(secs, s)
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	var during []int
	for s := secs[0]; s <= secs[len(secs)-1]; s++ {
		if s >= from && s <= to {
			during = append(during, arrivals[s])
			continue
		}
		if most := arrivalsAllowed(arrivals, s, failoverRPM); int64(arrivals[s]) > most {
			t.Errorf("second %d (outside the failover): %d arrivals at the upstream, allowance %d (at most %d with what the second before left)",
				s, arrivals[s], store.Allowance(s, failoverRPM), most)
		}
	}
	t.Logf("upstream arrivals per second: %v (allowance %d/s); from the kill to the return %v",
		arrivalsList(arrivals, secs), failoverPerSecond, during)
}

// checkFleetIdentity is checkIdentity for a fleet: the clients' counts
// against the replicas' counters summed, the upstream's 200s against the
// clients', and nothing left in flight or queued in any replica.
func checkFleetIdentity(t *testing.T, replicas []*procs.Proxy, out *outcomes, upstreamServed int) {
	t.Helper()
	for i, p := range replicas {
		waitFor(t, fmt.Sprintf("replica %d to hold nothing in flight or queued", i), func() bool {
			m := scrape(t, p.AdminURL)
			return sum(m, "meterproxy_in_flight", nil) == 0 && sum(m, "meterproxy_queue_depth", nil) == 0
		})
	}
	var fwd, ref, can [2]float64
	for _, p := range replicas {
		m := scrape(t, p.AdminURL)
		for c, class := range []string{"interactive", "bulk"} {
			fwd[c] += sum(m, "meterproxy_requests_total", map[string]string{"class": class, "outcome": "forwarded"})
			ref[c] += sum(m, "meterproxy_requests_total", map[string]string{"class": class, "outcome": "refused"})
			can[c] += sum(m, "meterproxy_requests_total", map[string]string{"class": class, "outcome": "cancelled"})
		}
	}
	for c, class := range []string{"interactive", "bulk"} {
		refused := 0
		for _, n := range out.refused[class] {
			refused += n
		}
		sent := out.ok[class] + refused + out.cancelled[class]
		if int(fwd[c]) != out.ok[class] || int(ref[c]) != refused || int(can[c]) != out.cancelled[class] {
			t.Errorf("%s: clients sent %d (ok %d, refused %d, cancelled %d); the replicas counted forwarded %v refused %v cancelled %v",
				class, sent, out.ok[class], refused, out.cancelled[class], fwd[c], ref[c], can[c])
		}
		t.Logf("%s: sent %d, forwarded %d, refused %v", class, sent, out.ok[class], out.refused[class])
	}
	if total := out.ok["interactive"] + out.ok["bulk"]; total != upstreamServed {
		t.Errorf("the upstream served %d, the clients got %d answers from it", upstreamServed, total)
	}
}

// checkRedisEmpty waits until the fleet's in-flight hash on the master at
// addr counts nothing in flight (every slot taken through Redis, before the
// failover or after, was given back), and checks that all three replicas
// heartbeat there.
func checkRedisEmpty(t *testing.T, addr, prefix string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	key := "{" + prefix + "}:inflight"
	var last map[string]string
	waitFor(t, "Redis's in-flight totals on the new master to return to 0", func() bool {
		m, err := c.HGetAll(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("read %s on %s: %v", key, addr, err)
		}
		last = m
		return (m["i"] == "" || m["i"] == "0") && (m["b"] == "" || m["b"] == "0")
	})
	t.Logf("in-flight hash on the new master at the end: %v", last)
	if ids, err := c.ZRange(t.Context(), "{"+prefix+"}:heartbeat", 0, -1).Result(); err != nil || len(ids) != 3 {
		t.Errorf("heartbeats on the new master: %v, %v; want the three replicas", ids, err)
	}
}
