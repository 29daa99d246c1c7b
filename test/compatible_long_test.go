//go:build load

package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// TestHeldOnCompatibleHostsWords: the fake provider speaks each
// OpenAI-compatible host's rate-limit words from its real buckets, while
// the config claims a hundred times the account's rate; bulk floods and
// interactive ticks along. The host's words alone hold bulk while they say
// the account is below the interactive reserve, and release it when room
// returns — Together's requests a second, Fireworks' prompt and generated
// tokens a second and its over-limit word, Mistral's tokens a minute,
// Groq's tokens a minute with fractional resets — interactive goes on,
// and the provider never has to refuse. Asserted on counts: the fake's,
// meterproxy's metrics and its /admin/state (issue 36 item 3).
func TestHeldOnCompatibleHostsWords(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds a dialect; skipped with -short")
	}
	long := strings.Repeat("tokens ", 120) // ~210 prompt tokens
	for _, tc := range []struct {
		name    string
		cfg     fakeprovider.Config
		body    string
		workers int
		// requestsLimit and tokensLimit are the limits /admin/state
		// reports, as the host counts them (-1: it sends no such count).
		requestsLimit, tokensLimit int64
	}{
		{"together", fakeprovider.Config{Dialect: fakeprovider.DialectTogether, RPM: 600}, "hi", 2, 10, -1},
		{"fireworks", fakeprovider.Config{Dialect: fakeprovider.DialectFireworks, TPM: 60000, OutputTPM: 60000}, long, 2, -1, -1},
		{"mistral", fakeprovider.Config{Dialect: fakeprovider.DialectMistral, RPM: 6000, TPM: 12000}, long, 4, -1, 12000},
		{"groq", fakeprovider.Config{Dialect: fakeprovider.DialectGroq, TPM: 12000}, long, 4, -1, 12000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a fake and a proxy each; counts, not timing, are asserted
			tc.cfg.Latency = 20 * time.Millisecond
			body := `{"model":"m","messages":[{"role":"user","content":"` + tc.body + `"}]}`
			runCompatibleHold(t, tc.cfg, body, tc.workers, tc.requestsLimit, tc.tokensLimit)
		})
	}
}

func runCompatibleHold(t *testing.T, fcfg fakeprovider.Config, body string, workers int, requestsLimit, tokensLimit int64) {
	fake := fakeprovider.New(fcfg)
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("log.level", "info")
	cfg.set("upstream.provider", "openai-compatible")
	cfg.set("account.requests_per_minute", 60000) // the config is wrong: the headers must hold
	cfg.set("classes.interactive.reserve", 0.3)
	cfg.set("classes.bulk.max_wait", "60s")
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 16)
	out := newOutcomes()
	send := func(ctx context.Context, class, key string) {
		in := body
		if class == "interactive" { // a short prompt: interactive alone never drains a token bucket
			in = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(in))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			out.record(class, 0, nil, err)
			return
		}
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		out.record(class, res.StatusCode, b, err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				send(ctx, "bulk", importKey)
			}
		})
	}
	tickUntil(ctx, &wg, 250*time.Millisecond, func() { send(t.Context(), "interactive", chatKey) })
	bulkAt := func() int { return countBy(fake.Requests(), importKey) }
	t.Cleanup(func() {
		if t.Failed() {
			reqs := fake.Requests()
			var last http.Header
			if len(reqs) > 0 {
				last = reqs[len(reqs)-1].Header
			}
			t.Logf("at the end: bulk %d, interactive %d, refused %v, other %.300v; the provider's %+v; its last request's headers %v",
				out.ok["bulk"], out.ok["interactive"], out.refused, out.other, fake.Stats(), last)
		}
	})

	// Held: only the host's words can hold bulk here.
	held := func() float64 {
		return sum(scrape(t, p.AdminURL), "meterproxy_admissions_total", map[string]string{"class": "bulk", "outcome": "held"})
	}
	untilScraped(t, "bulk held on the host's words", func() bool { return held() > 0 })
	atHold := bulkAt()
	// Released when room returns: more bulk reaches the provider than
	// was in flight when the hold began, and is held again.
	heldOnce := held()
	untilScraped(t, "bulk released and held again", func() bool { return bulkAt() > atHold+workers && held() > heldOnce })
	stop()
	wg.Wait()

	if st := fake.Stats(); st.RateLimited != 0 {
		t.Errorf("the provider refused %d requests: bulk was not held on its words", st.RateLimited)
	}
	if n := len(out.refused["interactive"]) + out.cancelled["interactive"] + len(out.other); n != 0 || out.ok["interactive"] == 0 {
		t.Errorf("interactive: %d answered 200, refused %v, cancelled %d, other %v", out.ok["interactive"], out.refused["interactive"], out.cancelled["interactive"], out.other)
	}
	if got := countBy(fake.Requests(), chatKey); got != out.ok["interactive"] {
		t.Errorf("the provider saw %d interactive requests, the callers got %d answers", got, out.ok["interactive"])
	}
	up2 := upstreamState(t, p)
	if up2.Status != http.StatusOK || up2.Requests.Limit != requestsLimit || up2.Tokens.Limit != tokensLimit {
		t.Errorf("/admin/state's upstream report %+v, want status 200, requests limit %d, tokens limit %d", up2, requestsLimit, tokensLimit)
	}
	t.Logf("bulk: %d served, %d at the first hold, %v held; interactive %d", out.ok["bulk"], atHold, held(), out.ok["interactive"])
}

// countBy is the requests in reqs sent with key.
func countBy(reqs []fakeprovider.Request, key string) int {
	n := 0
	for _, r := range reqs {
		if r.Header.Get("Authorization") == "Bearer "+key {
			n++
		}
	}
	return n
}

// untilScraped is poll.Until at a pace a scrape can keep: every 50 ms,
// for 30 s at most.
func untilScraped(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// upstreamReport is /admin/state's upstream section.
type upstreamReport struct {
	Status   int `json:"status"`
	Requests struct {
		Limit int64 `json:"limit"`
	} `json:"requests"`
	Tokens struct {
		Limit int64 `json:"limit"`
	} `json:"tokens"`
}

// upstreamState is the provider's last report in p's /admin/state.
func upstreamState(t *testing.T, p *procs.Proxy) upstreamReport {
	t.Helper()
	res, err := http.Get(p.AdminURL + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var state struct {
		Upstream *upstreamReport `json:"upstream"`
	}
	if err := json.NewDecoder(res.Body).Decode(&state); err != nil || state.Upstream == nil {
		t.Fatalf("/admin/state: %v, upstream %v", err, state.Upstream)
	}
	return *state.Upstream
}
