package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"
)

// withAccessLog returns cfg with the access log written to path: the
// logged target, measured beside the same configuration with it off.
func withAccessLog(cfg map[string]any, path string) map[string]any {
	out := make(map[string]any, len(cfg))
	for k, v := range cfg {
		out[k] = v
	}
	out["log"] = map[string]any{"level": "info", "format": "json", "access": path}
	return out
}

// accessLogLines stops the logged target t (which flushes its access
// log) and counts the lines it wrote to path, and the lines it dropped
// (meterproxy_access_log_dropped_total, read before it stops): the report
// shows the log kept up with the load it measured.
func accessLogLines(ctx context.Context, t *target, path string) (lines int, dropped float64, err error) {
	if dropped, err = metricValue(ctx, t.adminURL, "meterproxy_access_log_dropped_total "); err != nil {
		return 0, 0, err
	}
	t.stop()
	f, err := os.Open(path) //nolint:gosec // the bench's own temporary file
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines++
	}
	return lines, dropped, sc.Err()
}

// accessLogTable renders the access log's cost: the Redis store's
// target with it written to a file against the same with it off, in the
// same run.
func (r *report) accessLogTable(p func(string, ...any)) {
	at := r.open[targetRate]
	p("\n#### The access log: written to a file against off (Redis store, same run)\n\n")
	p("| measure | log off | log to a file | ratio |\n|---|---|---|---|\n")
	for _, m := range []struct {
		what    string
		off, on time.Duration
	}{
		{fmt.Sprintf("CPU per request at %d/s", targetRate), at[shared].cpuPerReq, at[logged].cpuPerReq},
		{fmt.Sprintf("p50 at %d/s", targetRate), at[shared].p50, at[logged].p50},
		{fmt.Sprintf("p99 at %d/s", targetRate), at[shared].p99, at[logged].p99},
		{"CPU per request, closed loop", r.closed[shared].cpuPerReq, r.closed[logged].cpuPerReq},
	} {
		if m.off == 0 && m.on == 0 {
			continue // a rate not in -rates
		}
		p("| %s | %s | %s | %s |\n", m.what, us(m.off), us(m.on), ratio(float64(m.on), float64(m.off)))
	}
	p("| closed loop, requests/s | %.0f | %.0f | %s |\n", r.closed[shared].throughput, r.closed[logged].throughput,
		ratio(r.closed[logged].throughput, r.closed[shared].throughput))
	p("| access log lines written / dropped (queue full) | – | %d / %.0f | – |\n", r.accessLines, r.accessDropped)
	if a, ok := r.allocs["meterproxy-access-log"]; ok {
		p("| handler allocations per request (go test -bench) | %.0f allocs, %.0f B | %.0f allocs, %.0f B | – |\n",
			r.allocs["meterproxy"].allocs, r.allocs["meterproxy"].bytes, a.allocs, a.bytes)
	}
}

// accessLogChecks are the targets for the access log: its CPU
// per request and p50 at the target rate within 10% of off, nothing
// dropped.
func (r *report) accessLogChecks() []check {
	at := r.open[targetRate]
	cpu := float64(at[logged].cpuPerReq) / float64(at[shared].cpuPerReq)
	p50 := float64(at[logged].p50) / float64(at[shared].p50)
	cs := []check{
		{fmt.Sprintf("access log on: CPU per request at %d/s within 10%% of off", targetRate), fmt.Sprintf("%.2f×", cpu), cpu <= 1.1, ""},
		{fmt.Sprintf("access log on: p50 at %d/s within 10%% of off", targetRate), fmt.Sprintf("%.2f×", p50), p50 <= 1.1, ""},
	}
	if !r.ran(targetRate) {
		for i := range cs {
			cs[i].got, cs[i].ok, cs[i].skip = "–", false, fmt.Sprintf("%d not in -rates", targetRate)
		}
	}
	return append(cs, check{"access log: no line dropped", fmt.Sprintf("%.0f", r.accessDropped), r.accessDropped == 0, ""})
}
