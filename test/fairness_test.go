package test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// fairFleet starts n replicas (one Redis between them when n > 1) on an
// account of 10 requests a second, of which bulk may take 8 (interactive
// reserves 2 and sends nothing), both bulk classes' fairness set to
// fairness, with callers nightly-import (importKey) and other-batch
// (batchKey), weighted as weights says, and returns their URLs and the
// fake provider.
func fairFleet(t *testing.T, n int, fairness string, weights map[string]int) ([]string, *fakeprovider.Provider) {
	t.Helper()
	const rpm = 600
	fake := fakeprovider.New(fakeprovider.Config{RPM: rpm, Latency: 20 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	if n > 1 {
		cfg = fleetConfig(up.URL, redistest.Start(t), redistest.Prefix(t))
		cfg.set("store.timeout", "1s") // about shares, not Redis faults: never degrade on a slow machine
		cfg.set("account.expected_replicas", n)
	}
	cfg.set("account.requests_per_minute", rpm)
	cfg.set("classes.interactive.reserve", 0.2)
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.set("classes.bulk.fairness", fairness)
	callers := []map[string]any{
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"},
		{"name": "other-batch", "key_env": "BATCH_KEY", "class": "bulk"},
	}
	for _, c := range callers {
		if w, ok := weights[c["name"].(string)]; ok {
			c["weight"] = w
		}
	}
	cfg.set("callers", callers)
	env := append([]string{"BATCH_KEY=" + batchKey}, fleetEnv...)
	urls := make([]string, n)
	for i := range urls {
		urls[i] = startProxy(t, cfg, env, importKey, batchKey).URL
	}
	return urls, fake
}

// TestFairWeightsOnTheFleet: two callers flooding bulk through three
// replicas, weights 3:1, reach the upstream 3:1 (±10%) over 20 s.
func TestFairWeightsOnTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s load run; skipped with -short")
	}
	t.Parallel()
	const runFor = 20 * time.Second
	urls, fake := fairFleet(t, 3, "callers", map[string]int{"nightly-import": 3, "other-batch": 1})
	ctx, cancel := context.WithTimeout(t.Context(), runFor)
	defer cancel()
	client := newClient(t, 128)
	var wg sync.WaitGroup
	for i := range 40 {
		key := []string{importKey, batchKey}[i%2]
		url := urls[(i/2)%len(urls)]
		wg.Go(func() {
			for ctx.Err() == nil {
				fairSend(ctx, client, url, key)
			}
		})
	}
	start := time.Now()
	wg.Wait()
	// Count what reached the upstream in the run's whole seconds after the
	// first (the backlogs build in the first).
	from, to := start.Add(time.Second), start.Add(runFor)
	n := map[string]int{}
	for _, r := range fake.Requests() {
		if r.Arrived.After(from) && r.Arrived.Before(to) {
			n[r.Header.Get("Authorization")]++
		}
	}
	a, b := n["Bearer "+importKey], n["Bearer "+batchKey]
	t.Logf("upstream arrivals over %s: weight 3 %d, weight 1 %d (ratio %.2f)", to.Sub(from), a, b, float64(a)/float64(max(b, 1)))
	if b == 0 || float64(a)/float64(b) < 2.7 || float64(a)/float64(b) > 3.3 {
		t.Errorf("arrivals %d:%d; want 3:1 ± 10%%", a, b)
	}
}

// fairSend posts one chat completion with key and returns the status (0 if
// the request failed, as one cut off when ctx ends) and how long it took.
func fairSend(ctx context.Context, client *http.Client, url, key string) (int, time.Duration) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return 0, 0
	}
	_ = res.Body.Close()
	return res.StatusCode, time.Since(start)
}
