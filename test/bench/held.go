package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// heldResult is the memory held requests cost the proxy.
type heldResult struct {
	held             int
	idle, full, peak int64 // RSS idle, RSS with every request held, peak RSS
	// heap, stacks and goroutines are the Go runtime's own figures with
	// every request held.
	heap, stacks, goroutines float64
}

func (h heldResult) perRequest() float64 { return float64(h.full-h.idle) / float64(h.held) }

// heldConfig never admits bulk: interactive has the whole account and
// bulk may not borrow, so every bulk request waits in the queue.
func heldConfig(upstream string, n int) map[string]any {
	return meterproxyConfig(upstream, "", map[string]any{
		"account": map[string]any{"requests_per_minute": 1, "max_in_flight": 4096},
		"classes": map[string]any{
			"interactive": map[string]any{"share": 1, "reserve": 0},
			"bulk":        map[string]any{"share": 0, "borrow": false, "max_wait": "10m", "max_queue": n + 1000},
		},
	})
}

// holdRequests opens n bulk requests against t, one connection each, waits
// until the proxy queues all of them, reads its memory, then lets them go.
func holdRequests(ctx context.Context, t *target, n int, h2c bool) (heldResult, error) {
	res := heldResult{held: n}
	var err error
	if res.idle, _, err = memory(t.pid); err != nil {
		return res, err
	}
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: -1, DisableKeepAlives: !h2c}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Authorization", "Bearer "+benchKey)
			req.Header.Set("Content-Type", "application/json")
			if r, err := client.Do(req); err == nil {
				_ = r.Body.Close()
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		q, err := queueDepth(ctx, t.adminURL)
		if err != nil {
			return res, err
		}
		if q >= n {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d requests queued after 2 minutes", q, n)
		}
		time.Sleep(100 * time.Millisecond) // polling the proxy's own gauge
	}
	res.full, res.peak, err = memory(t.pid)
	if err != nil {
		return res, err
	}
	// Where it went, by the Go runtime's own account.
	if res.heap, err = metricValue(ctx, t.adminURL, "go_memstats_heap_inuse_bytes "); err != nil {
		return res, err
	}
	if res.stacks, err = metricValue(ctx, t.adminURL, "go_memstats_stack_inuse_bytes "); err != nil {
		return res, err
	}
	if res.goroutines, err = metricValue(ctx, t.adminURL, "go_goroutines "); err != nil {
		return res, err
	}
	return res, nil
}

// queueDepth reads bulk's meterproxy_queue_depth, every pool's, from the
// admin port.
func queueDepth(ctx context.Context, admin string) (int, error) {
	m, err := procs.Scrape(ctx, admin)
	if err != nil {
		return 0, err
	}
	return int(m.Sum("meterproxy_queue_depth", map[string]string{"class": "bulk"})), nil
}

// errNoMetric means the exposition has no such series.
var errNoMetric = errors.New("no such series")

// metricValue reads the value of the series whose exposition line starts
// with prefix (name, labels and the space) from admin's /metrics.
func metricValue(ctx context.Context, admin, prefix string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = res.Body.Close() }()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s at %s/metrics: %w", strings.TrimSpace(prefix), admin, errNoMetric)
}
