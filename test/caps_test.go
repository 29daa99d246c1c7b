package test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

const batchKey = "sk-e2e-other-batch-ccccccccccccc"

// concurrency counts the requests each key has open at the upstream and
// the most it ever had, and when each arrived.
type concurrency struct {
	mu        sync.Mutex
	open, max map[string]int
	arrivals  map[string][]time.Time
	next      http.Handler
}

func (c *concurrency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Authorization")
	c.mu.Lock()
	c.open[key]++
	c.max[key] = max(c.max[key], c.open[key])
	c.arrivals[key] = append(c.arrivals[key], time.Now())
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.open[key]--
		c.mu.Unlock()
	}()
	c.next.ServeHTTP(w, r)
}

func (c *concurrency) peak(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max[key]
}

// TestCallerCapsOnTheFleet: two replicas on one Redis. nightly-import is
// capped at 3 in flight and 300 a minute, fleet-wide, and floods both
// replicas from 16 workers; other-batch, uncapped in the same class, sends
// steadily beside it. The upstream never sees more than 3 of the runaway's
// requests at once nor more than its rate; its surplus is refused with
// caller_cap_exceeded; other-batch is never refused and never waits behind
// the runaway's queue. Then again with two pools (account.models), the
// runaway's requests split between them: its cap is one across pools.
func TestCallerCapsOnTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("4 s fleet runs; skipped with -short")
	}
	for _, run := range []struct {
		name        string
		acrossPools bool
	}{{"one pool", false}, {"across pools", true}} {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel() // a fake and a fleet each: the two runs side by side
			runCallerCaps(t, run.acrossPools)
		})
	}
}

// runCallerCaps is TestCallerCapsOnTheFleet's run, with a second pool
// that half the runaway's requests name when pools is set.
func runCallerCaps(t *testing.T, pools bool) {
	const (
		capInFlight = 3
		capRPM      = 300 // 5 a second
		runFor      = 4 * time.Second
		latency     = 100 * time.Millisecond
	)
	srv := redistest.Start(t)
	conc := &concurrency{open: map[string]int{}, max: map[string]int{}, arrivals: map[string][]time.Time{},
		next: fakeprovider.New(fakeprovider.Config{Latency: latency})}
	up := startUpstream(t, conc)
	cfg := fleetConfig(up.URL, srv, redistest.Prefix(t))
	cfg.set("store.timeout", "1s") // about caps, not Redis faults: never degrade on a slow machine
	cfg.set("account.requests_per_minute", 60000)
	cfg.set("account.max_in_flight", 100)
	cfg.set("classes.bulk.max_wait", "1s")
	cfg.set("callers", []map[string]any{
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk",
			"max_in_flight": capInFlight, "requests_per_minute": capRPM},
		{"name": "other-batch", "key_env": "BATCH_KEY", "class": "bulk"},
	})
	if pools {
		cfg.set("account.models", []map[string]any{{"name": "other-model", "match": []string{"m2"}, "requests_per_minute": 60000, "max_in_flight": 100}})
	}
	env := append([]string{"BATCH_KEY=" + batchKey}, fleetEnv...)
	replicas := []string{startProxy(t, cfg, env, importKey, batchKey).URL, startProxy(t, cfg, env, importKey, batchKey).URL}
	client := newClient(t, 64)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	runaway, other := newOutcomes(), newOutcomes()
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(runFor)
	for i := range 16 {
		wg.Go(func() {
			body := body
			if pools && i%4 >= 2 {
				body = strings.Replace(body, `"m"`, `"m2"`, 1) // the other pool, from both replicas
			}
			for time.Now().Before(stop) {
				status, _, b := post(t, client, replicas[i%2]+"/v1/chat/completions", body,
					map[string]string{"Authorization": "Bearer " + importKey})
				runaway.record("bulk", status, b, nil)
			}
		})
	}
	for i := range 2 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				status, _, b := post(t, client, replicas[i]+"/v1/chat/completions", body,
					map[string]string{"Authorization": "Bearer " + batchKey})
				other.record("bulk", status, b, nil)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	if peak := conc.peak("Bearer " + importKey); peak > capInFlight {
		t.Errorf("the upstream saw %d of nightly-import's requests at once, cap %d fleet-wide", peak, capInFlight)
	}
	// Admissions follow Redis's one-second windows, capRPM/60 in each. A
	// request arrives a little after its admission, so the arrivals from
	// the first to the last span at most one window more than they touch.
	arr := conc.arrivals["Bearer "+importKey]
	if len(arr) == 0 {
		t.Fatal("no nightly-import request reached the upstream")
	}
	windows := int(arr[len(arr)-1].Unix()-arr[0].Unix()) + 2
	if n := len(arr); n > windows*capRPM/60 {
		t.Errorf("nightly-import: %d reached the upstream within %d one-second windows, cap %d a minute (%d a window)", n, windows, capRPM, capRPM/60)
	}
	if n := runaway.refused["bulk"]["caller_cap_exceeded"]; n == 0 {
		t.Errorf("nightly-import was never refused with caller_cap_exceeded: refusals %v", runaway.refused["bulk"])
	}
	if len(runaway.other) > 0 || len(other.other) > 0 {
		t.Errorf("unexpected answers: %v %v", runaway.other, other.other)
	}
	if len(other.refused["bulk"]) != 0 {
		t.Errorf("other-batch was refused %v beside a capped caller", other.refused["bulk"])
	}
	// Sequential at 100 ms a request, two workers send ~80 in 4 s when
	// nothing holds them; behind the runaway's 1 s waits they would send ~8.
	if n := other.ok["bulk"]; n < 40 {
		t.Errorf("other-batch: %d forwarded in %s; it waited behind the capped caller", n, elapsed.Round(time.Millisecond))
	}
	t.Logf("nightly-import: %d forwarded (cap %d/min), refusals %v, peak in flight upstream %d (cap %d); other-batch: %d forwarded, refusals %v",
		runaway.ok["bulk"], capRPM, runaway.refused["bulk"], conc.peak("Bearer "+importKey), capInFlight, other.ok["bulk"], other.refused["bulk"])
}
