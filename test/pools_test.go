package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// bulkPart is what bulk may take of a pool's allowance: all but the
// interactive reserve (classes.interactive.reserve, 0.3 by default).
const bulkPart = 0.7

// poolModels configures two pools, big (gpt-4o*) and small (gpt-4o-mini*
// listed first, so it is not covered), at bigRPM and smallRPM, and sends
// every other model to the account.
func poolModels(cfg config, bigRPM, smallRPM int) {
	cfg.set("account.models", []map[string]any{
		{"name": "small", "match": []string{"gpt-4o-mini*"}, "requests_per_minute": smallRPM, "max_in_flight": 100},
		{"name": "big", "match": []string{"gpt-4o*"}, "requests_per_minute": bigRPM, "max_in_flight": 100},
	})
}

// poolProxies starts replicas meterproxy replicas in front of upURL with
// the two pools at bigRPM and smallRPM: one in process, more on srv, a
// fleet.
func poolProxies(t *testing.T, srv *redistest.Server, replicas int, upURL string, bigRPM, smallRPM int) []*procs.Proxy {
	t.Helper()
	cfg := baseConfig(upURL)
	cfg.withCallers()
	if replicas > 1 {
		cfg = fleetConfig(upURL, srv, redistest.Prefix(t))
		cfg.set("store.timeout", "1s") // about pools, not Redis faults
		cfg.set("account.expected_replicas", replicas)
	}
	cfg.set("log.level", "info")
	cfg.set("account.requests_per_minute", 60000)
	poolModels(cfg, bigRPM, smallRPM)
	cfg.set("classes.bulk.max_wait", "30s")
	ps := make([]*procs.Proxy, replicas)
	for i := range ps {
		ps[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey)
	}
	return ps
}

// urlsOf are the proxies' URLs.
func urlsOf(ps []*procs.Proxy) []string {
	urls := make([]string, len(ps))
	for i, p := range ps {
		urls[i] = p.URL
	}
	return urls
}

// poolRun is a run of traffic per model through urls (spread over them),
// until ctx ends: a bulk flood on each of bulkModels and interactive
// traffic on chatModel every chatEvery. It returns the answers' statuses
// by class and model.
func poolRun(ctx context.Context, t *testing.T, urls []string, bulkModels []string, chatModel string, chatEvery time.Duration) map[string]map[int]int {
	t.Helper()
	client := newClient(t, 64)
	tally := newAnswerTally()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	send := func(ctx context.Context, key, model string) {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, model)
		who := "bulk " + model
		if key == chatKey {
			who = "interactive " + model
		}
		tally.send(ctx, t, client, who, urls[int(next.Add(1))%len(urls)]+"/v1/chat/completions", key, body)
	}
	for _, model := range bulkModels {
		for range 12 {
			wg.Go(func() {
				for ctx.Err() == nil {
					send(ctx, importKey, model)
				}
			})
		}
	}
	tickUntil(ctx, &wg, chatEvery, func() { send(t.Context(), chatKey, chatModel) })
	wg.Wait()
	return tally.counts()
}

// arrivalsByModel are the upstream's arrivals per second, by the model
// each request's body named.
func arrivalsByModel(t *testing.T, log []fakeprovider.Request) map[string]map[int64]int {
	t.Helper()
	out := map[string]map[int64]int{}
	for _, r := range log {
		var b struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("a logged body: %v", err)
		}
		if out[b.Model] == nil {
			out[b.Model] = map[int64]int{}
		}
		out[b.Model][r.Arrived.Unix()]++
	}
	return out
}

// TestPoolsPerModel: two pools with their own allowances, a bulk flood on
// both models at once and interactive on one, through one replica and
// through a fleet of three on Redis. Each model's arrivals at the upstream
// keep to its own pool's allowance, the small model's bulk runs at its own
// rate (the big one's flood does not slow it), interactive is all served
// and the upstream, which keeps the same limits per model, refuses
// nothing.
func TestPoolsPerModel(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s runs; skipped with -short")
	}
	srv := redistest.Start(t)
	const (
		bigRPM, smallRPM = 1200, 600 // 20 and 10 a second
		runFor           = 10 * time.Second
	)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			t.Parallel() // a fake and proxies each, their own key prefix: side by side
			fake := fakeprovider.New(fakeprovider.Config{RPM: 60000, RecordBodies: true, Latency: 20 * time.Millisecond,
				Models: []fakeprovider.ModelLimits{{Name: "gpt-4o", RPM: bigRPM}, {Name: "gpt-4o-mini", RPM: smallRPM}}})
			up := startUpstream(t, fake)
			urls := urlsOf(poolProxies(t, srv, replicas, up.URL, bigRPM, smallRPM))
			ctx, stop := context.WithTimeout(t.Context(), runFor)
			defer stop()
			answers := poolRun(ctx, t, urls, []string{"gpt-4o", "gpt-4o-mini"}, "gpt-4o", 250*time.Millisecond)

			st := fake.Stats()
			t.Logf("answers %v; the upstream served %d, refused %d", answers, st.Served, st.RateLimited)
			if st.RateLimited != 0 {
				t.Errorf("the upstream answered 429 %d times", st.RateLimited)
			}
			for who, codes := range answers {
				for code, n := range codes {
					if code != http.StatusOK && strings.HasPrefix(who, "interactive") {
						t.Errorf("%s: %d answers %d", who, n, code)
					}
				}
			}
			byModel := arrivalsByModel(t, fake.Requests())
			checkArrivals(t, byModel["gpt-4o"], bigRPM/60)
			checkArrivals(t, byModel["gpt-4o-mini"], smallRPM/60)
			small := 0
			for _, n := range byModel["gpt-4o-mini"] {
				small += n
			}
			// Bulk may take all but the interactive reserve of its pool.
			if want := int(runFor.Seconds() * smallRPM / 60 * bulkPart * 0.9); small < want {
				t.Errorf("the small model got %d requests upstream in %s; bulk may take %.0f a second of its own pool: want at least %d",
					small, runFor, smallRPM/60*bulkPart, want)
			}
		})
	}
}
