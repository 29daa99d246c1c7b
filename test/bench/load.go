package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// chatBody is the request every run sends: a small chat completion.
const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}`

// streamBody is the streamed variant.
const streamBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}`

// metricsT is a vegeta run's metrics.
type metricsT = vegeta.Metrics

func chatTarget(base string) vegeta.Targeter {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Bearer "+benchKey)
	return vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodPost, URL: base + "/v1/chat/completions",
		Body: []byte(chatBody), Header: h})
}

// runResult is one load run's figures.
type runResult struct {
	requests, errors uint64
	p50, p99, p999   time.Duration
	throughput       float64 // successful requests a second
	cpuPerReq        time.Duration
	redisPerReq      float64 // commands sent (script calls) per request
	redisAllPerReq   float64 // commands Redis executed, inside scripts too
	statusCodes      map[string]int
	firstError       string
}

// measure wraps a run with the target's CPU time and Redis's command count.
func measure(ctx context.Context, t *target, rs *redisServer, run func() *vegeta.Metrics) (runResult, error) {
	cpu0, err := t.cpu()
	if err != nil {
		return runResult{}, err
	}
	var sent0, all0 int64
	if rs != nil {
		if sent0, all0, err = rs.commands(ctx); err != nil {
			return runResult{}, err
		}
	}
	m := run()
	cpu1, err := t.cpu()
	if err != nil {
		return runResult{}, err
	}
	r := runResult{requests: m.Requests, p50: m.Latencies.P50, p99: m.Latencies.P99,
		p999: m.Latencies.Quantile(0.999), throughput: m.Throughput, statusCodes: m.StatusCodes}
	r.errors = m.Requests - uint64(float64(m.Requests)*m.Success+0.5)
	if len(m.Errors) > 0 {
		r.firstError = m.Errors[0]
	}
	if m.Requests > 0 {
		r.cpuPerReq = (cpu1 - cpu0) / time.Duration(m.Requests) //nolint:gosec // a request count, far below 2^63
		if rs != nil {
			sent1, all1, err := rs.commands(ctx)
			if err != nil {
				return runResult{}, err
			}
			r.redisPerReq = float64(sent1-sent0) / float64(m.Requests)
			r.redisAllPerReq = float64(all1-all0) / float64(m.Requests)
		}
	}
	return r, nil
}

// cpu is the CPU time t has used so far: its process's, or for a target
// run as a process group (nginx) every process's in the group.
func (t *target) cpu() (time.Duration, error) {
	if t.group {
		return groupCPUTime(t.pid)
	}
	return cpuTime(t.pid)
}

// openLoop sends rate requests a second for d, from at most conns
// connections, whatever the latency: the schedule never waits for answers.
func openLoop(t *target, rate int, d time.Duration, conns int) *vegeta.Metrics {
	a := attacker(conns)
	var m vegeta.Metrics
	for res := range a.Attack(chatTarget(t.url), vegeta.Rate{Freq: rate, Per: time.Second}, d, t.name) {
		m.Add(res)
	}
	m.Close()
	return &m
}

// attacker uses conns keep-alive connections and as many workers.
func attacker(conns int) *vegeta.Attacker {
	w := uint64(max(conns, 1)) //nolint:gosec // positive by construction
	return vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Connections(conns), vegeta.MaxConnections(conns),
		vegeta.Workers(w), vegeta.MaxWorkers(w), vegeta.Timeout(10*time.Second))
}

// closedLoop keeps conns requests in flight for d, each sent when the
// last one on its connection is answered: the most the target can do.
func closedLoop(t *target, d time.Duration, conns int) *vegeta.Metrics {
	a := attacker(conns)
	var m vegeta.Metrics
	for res := range a.Attack(chatTarget(t.url), vegeta.Rate{Freq: 0}, d, t.name) {
		m.Add(res)
	}
	m.Close()
	return &m
}

// streamResult is a streamed run's figures.
type streamResult struct {
	streams, cut   int
	ttfb50, ttfb99 time.Duration
}

// streams runs workers that each send streamed requests back to back for d
// and time the first byte of each body; a stream that ends without its
// [DONE] event, or with an error, is cut short.
func streams(ctx context.Context, t *target, d time.Duration, workers int) streamResult {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var mu sync.Mutex
	var ttfb []time.Duration
	var res streamResult
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				first, ok := oneStream(ctx, client, t.url)
				mu.Lock()
				res.streams++
				if ok {
					ttfb = append(ttfb, first)
				} else {
					res.cut++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(ttfb)
	if n := len(ttfb); n > 0 {
		res.ttfb50, res.ttfb99 = ttfb[n/2], ttfb[min(n-1, n*99/100)]
	}
	return res
}

func oneStream(ctx context.Context, client *http.Client, base string) (time.Duration, bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+benchKey)
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer func() { _ = res.Body.Close() }()
	br := bufio.NewReader(res.Body)
	if _, err := br.Peek(1); err != nil {
		return 0, false
	}
	first := time.Since(start)
	rest, err := io.ReadAll(br)
	if err != nil || res.StatusCode != http.StatusOK || !bytes.Contains(rest, []byte("data: [DONE]")) {
		return first, false
	}
	return first, true
}
