package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// report is one run's figures, by target name.
type report struct {
	names       []string
	open        map[int]map[string]runResult
	closed      map[string]runResult
	streams     map[string]streamResult
	allocs      map[string]allocResult
	held        heldResult // over HTTP/1.1, a connection each
	heldH2C     heldResult // over h2c, multiplexed
	storeErrors float64
	// accessLines and accessDropped are what the logged target wrote to
	// its access log and dropped (its queue full).
	accessLines   int
	accessDropped float64
}

func newReport(targets []*target) *report {
	r := &report{open: map[int]map[string]runResult{}, closed: map[string]runResult{}, streams: map[string]streamResult{}}
	for _, t := range targets {
		r.names = append(r.names, t.name)
	}
	return r
}

const (
	direct, base, local, shared = "direct", "baseline", "meterproxy-local", "meterproxy-redis"
	logged                      = "meterproxy-log"
	targetRate                  = 2000
)

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// markdown renders the report: one table, ratios to the baseline.
func (r *report) markdown(o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## meterproxy vs a plain httputil.ReverseProxy\n\n")
	p("%s, %d cores, %s; each run %s after a %s warm-up, %d connections; ratios are to the baseline, in this run.\n\n",
		runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.duration, o.warmup, o.conns)
	p("| measure | direct | baseline | meterproxy in-process | ratio | meterproxy Redis | ratio |\n|---|---|---|---|---|---|---|\n")
	row := func(what string, f func(name string) (string, float64)) {
		p("| %s |", what)
		vals := map[string]float64{}
		for _, n := range []string{direct, base, local, shared} {
			s, v := f(n)
			vals[n] = v
			p(" %s |", s)
			if n == local || n == shared {
				p(" %s |", ratio(v, vals[base]))
			}
		}
		p("\n")
	}
	for _, rate := range o.rates {
		runs := r.open[rate]
		for _, q := range []struct {
			name string
			get  func(runResult) time.Duration
		}{{"p50", func(x runResult) time.Duration { return x.p50 }}, {"p99", func(x runResult) time.Duration { return x.p99 }},
			{"p99.9", func(x runResult) time.Duration { return x.p999 }}} {
			row(fmt.Sprintf("%d/s latency %s", rate, q.name), func(n string) (string, float64) {
				return us(q.get(runs[n])), float64(q.get(runs[n]))
			})
		}
		row(fmt.Sprintf("%d/s errors / requests", rate), func(n string) (string, float64) {
			return fmt.Sprintf("%d / %d", runs[n].errors, runs[n].requests), float64(runs[n].errors)
		})
	}
	row("closed loop, requests/s", func(n string) (string, float64) {
		return fmt.Sprintf("%.0f", r.closed[n].throughput), r.closed[n].throughput
	})
	row("CPU per request, closed loop", func(n string) (string, float64) {
		return us(r.closed[n].cpuPerReq), float64(r.closed[n].cpuPerReq)
	})
	row(fmt.Sprintf("CPU per request at %d/s", targetRate), func(n string) (string, float64) {
		return us(r.open[targetRate][n].cpuPerReq), float64(r.open[targetRate][n].cpuPerReq)
	})
	row("stream time to first byte p50", func(n string) (string, float64) {
		return us(r.streams[n].ttfb50), float64(r.streams[n].ttfb50)
	})
	row("stream time to first byte p99", func(n string) (string, float64) {
		return us(r.streams[n].ttfb99), float64(r.streams[n].ttfb99)
	})
	row("streams cut short / streams", func(n string) (string, float64) {
		return fmt.Sprintf("%d / %d", r.streams[n].cut, r.streams[n].streams), float64(r.streams[n].cut)
	})
	r.accessLogTable(p)
	p("\n| measure | meterproxy | baseline |\n|---|---|---|\n")
	p("| Redis commands sent per request at %d/s (script calls; Redis store) | %.3f | – |\n", targetRate, r.open[targetRate][shared].redisPerReq)
	p("| Redis commands sent per request, closed loop | %.3f | – |\n", r.closed[shared].redisPerReq)
	p("| commands Redis executed per request at %d/s, inside the script too | %.3f | – |\n", targetRate, r.open[targetRate][shared].redisAllPerReq)
	p("| Redis store errors during the run | %.0f | – |\n", r.storeErrors)
	p("| handler allocations per request (go test -bench) | %.0f allocs, %.0f B | %.0f allocs, %.0f B |\n",
		r.allocs["meterproxy"].allocs, r.allocs["meterproxy"].bytes, r.allocs["baseline"].allocs, r.allocs["baseline"].bytes)
	for _, h := range []struct {
		how string
		res heldResult
	}{{"HTTP/1.1, a connection each", r.held}, {"h2c, multiplexed", r.heldH2C}} {
		n := float64(h.res.held)
		p("| memory with %d bulk requests held (%s) | %.1f MiB above idle (%.0f B each; RSS %.1f → %.1f MiB, peak %.1f MiB; Go heap %.0f B and stacks %.0f B a request, %.0f goroutines) | – |\n",
			h.res.held, h.how, float64(h.res.full-h.res.idle)/(1<<20), h.res.perRequest(),
			float64(h.res.idle)/(1<<20), float64(h.res.full)/(1<<20), float64(h.res.peak)/(1<<20),
			h.res.heap/n, h.res.stacks/n, h.res.goroutines)
	}
	p("\n### Targets\n\n| target | measured | |\n|---|---|---|\n")
	for _, c := range r.checks() {
		mark := "met"
		if !c.ok {
			mark = "**missed**"
		}
		p("| %s | %s | %s |\n", c.what, c.got, mark)
	}
	return b.String()
}

// check is one of the targets.
type check struct {
	what, got string
	ok        bool
}

func (r *report) checks() []check {
	baseClosed, redisClosed := r.closed[base].throughput, r.closed[shared].throughput
	at := r.open[targetRate]
	addedP50 := at[shared].p50 - at[base].p50
	cpuRatio := float64(r.closed[shared].cpuPerReq) / float64(r.closed[base].cpuPerReq)
	p99Ratio := float64(at[shared].p99) / float64(at[base].p99)
	cut := r.streams[local].cut + r.streams[shared].cut
	return append([]check{
		{"Redis store closed-loop throughput ≥ 90% of the baseline's", fmt.Sprintf("%.0f%%", 100*redisClosed/baseClosed), redisClosed >= 0.9*baseClosed},
		{"CPU per request ≤ 1.2× the baseline (Redis store, closed loop)", fmt.Sprintf("%.2f×", cpuRatio), cpuRatio <= 1.2},
		{fmt.Sprintf("added p50 at %d/s ≤ 150 µs (Redis store)", targetRate), us(addedP50), addedP50 <= 150*time.Microsecond},
		{fmt.Sprintf("p99 at %d/s within 1.5× the baseline's (Redis store)", targetRate), fmt.Sprintf("%.2f×", p99Ratio), p99Ratio <= 1.5},
		{fmt.Sprintf("Redis commands per request at %d/s ≤ 0.5", targetRate), fmt.Sprintf("%.3f", at[shared].redisPerReq), at[shared].redisPerReq <= 0.5},
		{"≤ 4 KiB per held request (HTTP/1.1)", fmt.Sprintf("%.0f B", r.held.perRequest()), r.held.perRequest() <= 4096},
		{"≤ 4 KiB per held request (h2c)", fmt.Sprintf("%.0f B", r.heldH2C.perRequest()), r.heldH2C.perRequest() <= 4096},
		{"meterproxy streams cut short = 0", fmt.Sprint(cut), cut == 0},
		{"no meterproxy errors in any open-loop run", fmt.Sprint(r.openErrors()), r.openErrors() == 0},
		{"Redis store never degraded (0 store errors)", fmt.Sprintf("%.0f", r.storeErrors), r.storeErrors == 0},
	}, r.accessLogChecks()...)
}

func (r *report) openErrors() uint64 {
	var n uint64
	for _, runs := range r.open {
		n += runs[local].errors + runs[shared].errors + runs[logged].errors
	}
	return n
}

// missed names the targets not met.
func (r *report) missed() []string {
	var out []string
	for _, c := range r.checks() {
		if !c.ok {
			out = append(out, c.what+" ("+c.got+")")
		}
	}
	return out
}
