package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestProviderAccounting runs meterproxy for 90 s against an upstream that
// counts tokens as the provider of each dialect does (fakeprovider's
// EnforceTPM): a continuously refilled bucket of 60,000 tokens a minute,
// each request charged as that provider charges it — OpenAI the larger of
// max_tokens and the prompt at admission, nothing given back; Anthropic the
// input at admission and the output as generated — and 429 when the bucket
// cannot pay. The account is partly spent when the run starts (30% left)
// and another client spends it directly, beside meterproxy, at half the
// refill. Through meterproxy a bulk flood asks for max_tokens 2,000 (its
// answers use a few), and interactive traffic goes steadily.
//
// The upstream never answers 429, interactive is always served, and bulk
// is charged within 15% of what the provider's own accounting (its log)
// leaves above the reserve.
//
// For Anthropic, account.tokens_per_minute is its input budget and its
// own headers hold output back (proxy/dialect.go); charged as one combined
// budget reserving max_tokens, bulk got 3% of what Anthropic's accounting
// left it (91 requests charged 2,548 tokens of 88,496). Each runs through
// one replica and through a fleet of three on one Redis. Azure is issue
// 13's next step.
func TestProviderAccounting(t *testing.T) {
	if testing.Short() {
		t.Skip("90 s runs; skipped with -short")
	}
	srv := redistest.Start(t)
	for _, tc := range []struct{ name, provider, path, body string }{
		{"openai", "openai", "/v1/chat/completions", `{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`},
		{"anthropic", "anthropic", "/v1/messages", `{"model":"c","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		for _, replicas := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d replicas", tc.name, replicas), func(t *testing.T) {
				t.Parallel()
				runProviderAccounting(t, srv, replicas, tc.provider, tc.path, tc.body)
			})
		}
	}
}

// runProviderAccounting is one run through replicas meterproxy replicas
// (one in process; more on srv, a fleet), the traffic spread over them as
// a load balancer would.
func runProviderAccounting(t *testing.T, srv *redistest.Server, replicas int, provider, path, bodyFormat string) {
	const (
		tpm         = 60000 // 1,000 a second
		start       = 0.3
		reserve     = 0.2
		runFor      = 90 * time.Second
		chatEvery   = 500 * time.Millisecond
		otherEvery  = time.Second
		bulkWorkers = 8
		otherKey    = "sk-someone-else-on-the-same-account"
	)
	fake := fakeprovider.New(fakeprovider.Config{TPM: tpm, TPMStart: start, EnforceTPM: true, Latency: 20 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	if replicas > 1 {
		cfg = fleetConfig(up.URL, srv, redistest.Prefix(t))
		cfg.set("store.timeout", "1s") // about the provider's accounting, not Redis faults
		cfg.set("account.expected_replicas", replicas)
	}
	cfg.set("upstream.provider", provider)
	cfg.set("account.requests_per_minute", 60000)
	cfg.set("account.tokens_per_minute", tpm)
	cfg.set("classes.interactive.reserve", reserve)
	cfg.set("classes.bulk.max_wait", "2m") // held, not refused: the flood outlasts the run
	cfg.set("classes.interactive.max_wait", "30s")
	cfg.withCallers()
	urls := make([]string, replicas)
	for i := range urls {
		urls[i] = startProxy(t, cfg, fleetEnv, chatKey, importKey).URL + path
	}
	var next atomic.Int64
	proxyURL := func() string { return urls[int(next.Add(1))%len(urls)] }
	bulkBody, chatBody, otherBody := fmt.Sprintf(bodyFormat, 2000), fmt.Sprintf(bodyFormat, 100), fmt.Sprintf(bodyFormat, 500)

	client := newClient(t, bulkWorkers+8)
	ctx, stop := context.WithTimeout(t.Context(), runFor)
	defer stop()
	var (
		mu      sync.Mutex
		answers = map[string]map[int]int{"bulk": {}, "interactive": {}, "other": {}}
	)
	send := func(ctx context.Context, who, url, key, body string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			return // the run ended while it waited
		}
		_ = res.Body.Close()
		mu.Lock()
		answers[who][res.StatusCode]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range bulkWorkers {
		wg.Go(func() {
			for ctx.Err() == nil {
				send(ctx, "bulk", proxyURL(), importKey, bulkBody)
			}
		})
	}
	// Interactive and the other client on tickers: their load does not
	// depend on how fast they are answered.
	var chatSent atomic.Int64
	tick := func(every time.Duration, f func()) {
		wg.Go(func() {
			tk := time.NewTicker(every)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
					wg.Go(f)
				}
			}
		})
	}
	tick(chatEvery, func() {
		chatSent.Add(1)
		send(t.Context(), "interactive", proxyURL(), chatKey, chatBody)
	})
	tick(otherEvery, func() { send(t.Context(), "other", up.URL+path, otherKey, otherBody) })
	wg.Wait()

	// The provider's own accounting, from its log: what it had above the
	// reserve to give over the run, less what interactive and the other
	// client were charged, against what bulk was charged.
	charged := map[string]int{}
	for _, r := range fake.Requests() {
		switch r.Header.Get("Authorization") {
		case "Bearer " + importKey:
			charged["bulk"] += r.TokensCharged
		case "Bearer " + chatKey:
			charged["interactive"] += r.TokensCharged
		case "Bearer " + otherKey:
			charged["other"] += r.TokensCharged
		}
	}
	leftForBulk := (start-reserve)*tpm + runFor.Seconds()*tpm/60 - float64(charged["interactive"]+charged["other"])
	bulk := float64(charged["bulk"])
	st := fake.Stats()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("provider: %d served, %d refused 429; answers: bulk %v, interactive %v (%d sent), other client %v; charged %v",
		st.Served, st.RateLimited, answers["bulk"], answers["interactive"], chatSent.Load(), answers["other"], charged)
	t.Logf("the provider's accounting left %.0f tokens above the reserve for bulk; bulk was charged %.0f (%.0f%%)",
		leftForBulk, bulk, 100*bulk/leftForBulk)
	if st.RateLimited != 0 {
		t.Errorf("the upstream answered 429 %d times", st.RateLimited)
	}
	for _, who := range []string{"bulk", "interactive"} {
		for code, n := range answers[who] {
			if code != http.StatusOK {
				t.Errorf("%s: %d answers %d", who, n, code)
			}
		}
	}
	if n := answers["interactive"][http.StatusOK]; int64(n) < chatSent.Load()-1 {
		t.Errorf("interactive: %d of %d served", n, chatSent.Load())
	}
	if bulk < 0.85*leftForBulk || bulk > 1.15*leftForBulk {
		t.Errorf("bulk was charged %.0f tokens; the provider left %.0f above the reserve: want within 15%%", bulk, leftForBulk)
	}
}
