//go:build load

package test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestBulkResumesAtTheReserve is issue 13's finding: an upstream whose
// token bucket refills continuously, like OpenAI's (12,000 tokens a
// minute, 200 a second), starts at a tenth; the interactive reserve is
// 0.2; each bulk request costs 200 tokens. The provider's reset says when
// the bucket is full (54 s away), but it is back at the reserve after 6 s,
// and from then on refills one bulk request's worth a second. Held until
// the reset, bulk got 1 request through in 30 s; held until the bucket is
// back at the reserve it must get at least 20, without ever taking the
// bucket below the reserve by more than the requests in flight.
func TestBulkResumesAtTheReserve(t *testing.T) {
	const (
		tpm     = 12000
		reserve = 0.2
		runFor  = 30 * time.Second
		workers = 4
		cost    = 200 // tokens per request, as the fake provider counts them: a quarter of the body's bytes
	)
	fake := fakeprovider.New(fakeprovider.Config{TPM: tpm, TPMStart: 0.1, Latency: 10 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := baseConfig(up.URL)
	cfg.set("account.requests_per_minute", 60000)
	cfg.set("classes.interactive.reserve", reserve)
	cfg.set("classes.bulk.max_wait", "40s")
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	prefix, suffix := `{"model":"m","messages":[{"role":"user","content":"`, `"}]}`
	body := prefix + strings.Repeat("x", cost*4-len(prefix)-len(suffix)) + suffix
	client := newClient(t, workers)
	start := time.Now()
	ctx, stop := context.WithTimeout(t.Context(), runFor)
	defer stop()
	tally := newAnswerTally()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				tally.send(ctx, t, client, "bulk", p.URL+"/v1/chat/completions", importKey, body)
			}
		})
	}
	wg.Wait()
	other := tally.counts()["bulk"]
	served := other[http.StatusOK]
	delete(other, http.StatusOK)
	st := fake.Stats()
	// The first requests go before any response has said the bucket is
	// low; by 10 s the gate has read it.
	lowest := tpm
	for _, r := range fake.Requests() {
		if r.Status == http.StatusOK && r.Arrived.Sub(start) > 10*time.Second {
			lowest = min(lowest, r.TokensRemaining)
		}
	}
	t.Logf("bulk: %d served in %s (%v otherwise), upstream served %d; the lowest remaining a response reported after 10 s: %d tokens (reserve %d)",
		served, runFor, other, st.Served, lowest, int(reserve*tpm))
	if served < 20 {
		t.Errorf("bulk got %d requests through in %s; the bucket refilled one a second above the reserve after 6 s: want at least 20", served, runFor)
	}
	if floor := int(reserve*tpm) - workers*cost; lowest < floor {
		t.Errorf("a response reported %d tokens remaining: bulk went below the reserve by more than its %d workers' requests (%d)", lowest, workers, floor)
	}
	if len(other) != 0 {
		t.Errorf("bulk answers other than 200: %v", other)
	}
}
