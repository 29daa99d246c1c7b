package test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestBulkHeldOnUpstreamHeaders: the account really allows 10 requests a
// second (the fake provider's own limit) while the config claims 100. The
// proxy learns the truth from the upstream's headers: bulk is held while
// the remaining allowance is below the 30% interactive reserve and resumes
// when it recovers; interactive keeps flowing; the upstream never has to
// answer 429. Once with OpenAI's headers, once with Anthropic's.
func TestBulkHeldOnUpstreamHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s runs; skipped with -short")
	}
	for _, tc := range []struct{ name, path, body string }{
		{"openai", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"anthropic", "/v1/messages", `{"model":"c","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a fake and a proxy each: the two dialects' runs side by side
			runUpstreamHold(t, tc.path, tc.body)
		})
	}
}

func runUpstreamHold(t *testing.T, path, body string) {
	const (
		realRPM = 600 // what the account really allows: 10 a second
		runFor  = 10 * time.Second
		workers = 20
		chat    = 3 // interactive a second
	)
	fake := fakeprovider.New(fakeprovider.Config{RPM: realRPM, Latency: 20 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("account.requests_per_minute", 6000) // the config is wrong: 100 a second
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 64)
	out := newOutcomes()
	send := func(ctx context.Context, class, key string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Api-Key", key)
		res, err := client.Do(req)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				out.record(class, 0, nil, err)
				return
			}
			t.Error(err)
			return
		}
		defer func() { _ = res.Body.Close() }()
		out.record(class, res.StatusCode, nil, nil)
	}
	bulkCtx, stopBulk := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for bulkCtx.Err() == nil {
				send(bulkCtx, "bulk", importKey)
			}
		})
	}
	isBulk := func(r fakeprovider.Request) bool {
		return r.Header.Get("Authorization") == "Bearer "+importKey || r.Header.Get("X-Api-Key") == importKey
	}
	// Run at least runFor, and on (up to 25 s) until bulk has been held and
	// has resumed: how soon the account recovers depends on how deep the
	// last burst went.
	tick := time.NewTicker(time.Second / chat)
	for n := 0; ; n++ {
		<-tick.C
		wg.Go(func() { send(t.Context(), "interactive", chatKey) })
		elapsed := time.Since(start)
		if n%chat == 0 && elapsed >= runFor && (resumedAfterHold(fake.Requests(), isBulk) || elapsed >= 25*time.Second) {
			break
		}
	}
	tick.Stop()
	stop := time.Now()
	stopBulk() // bulk still held at the end is cancelled by its client
	wg.Wait()

	st := fake.Stats()
	if st.RateLimited != 0 {
		t.Errorf("the upstream answered 429 %d times: bulk was not held back", st.RateLimited)
	}
	if len(out.refused["interactive"]) != 0 || out.cancelled["interactive"] != 0 || out.ok["interactive"] < chat*9 {
		t.Errorf("interactive: %d admitted, refused %v, cancelled %d; want every one admitted", out.ok["interactive"], out.refused["interactive"], out.cancelled["interactive"])
	}
	mfs := scrape(t, p.AdminURL)
	held := sum(mfs, "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"})
	if held == 0 {
		t.Error("bulk was never held")
	}
	if !resumedAfterHold(fake.Requests(), isBulk) {
		t.Error("bulk was never held back by the upstream's word and then resumed")
	}
	t.Logf("%s run; upstream: %d served, %d refused; bulk %d forwarded (%d held first), %d cancelled at the end; interactive %d",
		stop.Sub(start).Round(time.Second), st.Served, st.RateLimited, out.ok["bulk"], int(held), out.cancelled["bulk"], out.ok["interactive"])
}

// resumedAfterHold: bulk, flooding, stopped reaching the upstream for at
// least 1.5 s (longer than any window wait: a hold on the upstream's word),
// then reached it again.
func resumedAfterHold(reqs []fakeprovider.Request, isBulk func(fakeprovider.Request) bool) bool {
	var last time.Time
	for _, r := range reqs {
		if !isBulk(r) {
			continue
		}
		if !last.IsZero() && r.Arrived.Sub(last) >= 1500*time.Millisecond {
			return true
		}
		last = r.Arrived
	}
	return false
}
