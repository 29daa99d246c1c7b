//go:build load

package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestPoolTokensEveryShape: a token limit on the account only, on a pool
// only, on both, on neither — each pool receives at the upstream what its
// own limits allow, on one replica and on a fleet of three on one Redis.
// Where a pool has a token limit its tokens bind (a fifth of a second's
// tokens a request, well under its requests); where it has none, its
// requests do, and no token limit elsewhere holds it.
func TestPoolTokensEveryShape(t *testing.T) {
	const rpm, tpm = 1200, 60000 // 20 requests a second; 1,000 tokens, 5 requests of 200
	shapes := []struct {
		name                string
		accountTPM, poolTPM int
	}{
		{"account only", tpm, 0},
		{"pool only", 0, tpm},
		{"both", tpm, tpm},
		{"neither", 0, 0},
	}
	srv := redistest.Start(t)
	for _, replicas := range []int{1, 3} {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%s/replicas=%d", sh.name, replicas), func(t *testing.T) {
				fake := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond, RecordBodies: true})
				up := startUpstream(t, fake)
				cfg := baseConfig(up.URL)
				cfg.set("upstream.provider", "openai")
				cfg.set("account.requests_per_minute", rpm)
				cfg.set("account.tokens_per_minute", sh.accountTPM)
				cfg.set("account.max_in_flight", 100)
				cfg.set("account.models", []map[string]any{
					{"name": "pool", "match": []string{"gpt-pool"}, "requests_per_minute": rpm, "tokens_per_minute": sh.poolTPM, "max_in_flight": 100},
				})
				loads := []poolLoad{
					{pool: "default", model: "gpt-account", rpm: rpm, tpm: sh.accountTPM, maxTokens: tpm / 300},
					{pool: "pool", model: "gpt-pool", rpm: rpm, tpm: sh.poolTPM, maxTokens: tpm / 300},
				}
				urls := poolProxiesOf(t, cfg, srv, replicas)
				from, to := runPoolLoad(t, urls, loads, 5*time.Second)
				checkPoolUpstream(t, fake.Requests(), loads, from, to)
			})
		}
	}
}
