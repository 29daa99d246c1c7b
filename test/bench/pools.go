package main

import (
	"context"
	"fmt"
	"time"
)

// poolCounts are the configurations whose idle cost is compared: what a
// replica costs with no traffic must not grow with its pools.
var poolCounts = []int{1, 50}

// poolsResult is one meterproxy's CPU with a number of model pools, on
// the Redis store: its CPU over a second idle (idleCPU), and a request at
// a fixed rate.
type poolsResult struct {
	pools   int
	idleCPU time.Duration
	atRate  runResult
}

// poolsConfig is meterproxyConfig on Redis with n pools: the one the
// benchmark's model matches and n-1 that no request matches.
func poolsConfig(upstream, redisURL string, n int) map[string]any {
	cfg := meterproxyConfig(upstream, redisURL, nil)
	pools := []map[string]any{{"name": "small", "match": []string{"gpt-4o-mini*"}, "requests_per_minute": 60_000_000, "max_in_flight": 4096}}
	for i := 1; i < n; i++ {
		pools = append(pools, map[string]any{"name": fmt.Sprintf("idle-%02d", i), "match": []string{fmt.Sprintf("idle-model-%02d*", i)},
			"requests_per_minute": 600_000, "max_in_flight": 64})
	}
	cfg["account"].(map[string]any)["models"] = pools
	return cfg
}

// measurePools runs a meterproxy with each of poolCounts' pools and
// measures its CPU idle for 2d (after settle, its start's own work done:
// /proc counts CPU in 10 ms ticks, so the idle span is the longer) and at
// rate for d.
func measurePools(ctx context.Context, rep *report, bin, dir, upstream string, rs *redisServer, d time.Duration, rate, conns int) error {
	const settle = 3 * time.Second
	for _, n := range poolCounts {
		logf("meterproxy with %d pools: idle for %s, then %d/s for %s", n, 2*d, rate, d)
		t, err := startMeterproxy(ctx, bin, dir, fmt.Sprintf("meterproxy-%d-pools", n), poolsConfig(upstream, rs.url, n))
		if err != nil {
			return err
		}
		res, err := poolsRun(ctx, t, rs, settle, d, rate, conns)
		t.stop()
		if err != nil {
			return err
		}
		res.pools = n
		rep.cost.pools = append(rep.cost.pools, res)
	}
	return nil
}

// poolsRun is measurePools's run of one target.
func poolsRun(ctx context.Context, t *target, rs *redisServer, settle, d time.Duration, rate, conns int) (poolsResult, error) {
	closedLoop(t, time.Second, conns) // connections and pools warm, as in the other runs
	select {
	case <-ctx.Done():
		return poolsResult{}, ctx.Err()
	case <-time.After(settle): // a benchmark's wait: what it measures is time
	}
	cpu0, err := t.cpu()
	if err != nil {
		return poolsResult{}, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return poolsResult{}, ctx.Err()
	case <-time.After(2 * d):
	}
	cpu1, err := t.cpu()
	if err != nil {
		return poolsResult{}, err
	}
	res := poolsResult{idleCPU: time.Duration(float64(cpu1-cpu0) / time.Since(start).Seconds())}
	res.atRate, err = measure(ctx, t, rs, func() *metricsT { return openLoop(t, rate, d, conns) })
	return res, err
}
