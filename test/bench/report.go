package main

import (
	"fmt"
	"runtime"
	"slices"
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
	// nginx says how nginx ran (its version and workers), or why it did
	// not; nginxRan is whether it did.
	nginx    string
	nginxRan bool
	// accessLines and accessDropped are what the logged target wrote to
	// its access log and dropped (its queue full).
	accessLines   int
	accessDropped float64
	// cost is what a request and an idle replica cost meterproxy, by
	// configuration and by profile.
	cost costResult
}

// costResult is the run's figures on where meterproxy's CPU goes: with 1
// and with 50 pools, idle and at a fixed rate (measurePools), and the
// parts of a profile under closed-loop load (profileRun).
type costResult struct {
	pools   []poolsResult
	profile []shareResult
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
	logged, nginxName           = "meterproxy-log", "nginx"
	// targetRate is the rate of the Redis-commands and access-log
	// targets; goalRate the rate of the targets against nginx.
	targetRate, goalRate = 2000, 1000
)

// columns are the main table's targets, in order.
var columns = []string{direct, base, nginxName, local, shared}

// has says whether target name ran.
func (r *report) has(name string) bool { return slices.Contains(r.names, name) }

// ran says whether the run measured the open loop at rate.
func (r *report) ran(rate int) bool { _, ok := r.open[rate]; return ok }

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
	p("## meterproxy vs a plain httputil.ReverseProxy and nginx\n\n")
	p("%s, %d cores, %s; each run %s after a %s warm-up, %d connections; ratios are to the baseline, in this run. nginx: %s.\n\n",
		runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.duration, o.warmup, o.conns, r.nginx)
	p("| measure | direct | baseline | nginx | meterproxy in-process | ratio | meterproxy Redis | ratio |\n|---|---|---|---|---|---|---|---|\n")
	row := func(what string, f func(name string) (string, float64)) {
		p("| %s |", what)
		vals := map[string]float64{}
		for _, n := range columns {
			s, v := "–", 0.0
			if r.has(n) {
				s, v = f(n)
			}
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
		row(fmt.Sprintf("%d/s added p50 over a direct hit", rate), func(n string) (string, float64) {
			if n == direct {
				return "–", 0
			}
			d := runs[n].p50 - runs[direct].p50
			return us(d), float64(d)
		})
		row(fmt.Sprintf("%d/s CPU per request", rate), func(n string) (string, float64) {
			return us(runs[n].cpuPerReq), float64(runs[n].cpuPerReq)
		})
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
	if r.ran(targetRate) {
		p("| Redis commands sent per request at %d/s (script calls; Redis store) | %.3f | – |\n", targetRate, r.open[targetRate][shared].redisPerReq)
	}
	p("| Redis commands sent per request, closed loop | %.3f | – |\n", r.closed[shared].redisPerReq)
	if r.ran(targetRate) {
		p("| commands Redis executed per request at %d/s, inside the script too | %.3f | – |\n", targetRate, r.open[targetRate][shared].redisAllPerReq)
	}
	p("| Redis store errors during the run | %.0f | – |\n", r.storeErrors)
	p("| handler allocations per request (go test -bench) | %.0f allocs, %.0f B | %.0f allocs, %.0f B |\n",
		r.allocs["meterproxy"].allocs, r.allocs["meterproxy"].bytes, r.allocs["baseline"].allocs, r.allocs["baseline"].bytes)
	if f, ok := r.allocs["floor"]; ok {
		p("| allocations of the same request with no proxy: the transport alone, its upstream and the benchmark's own (the floor under both columns) | %.0f allocs, %.0f B | %.0f allocs, %.0f B |\n",
			f.allocs, f.bytes, f.allocs, f.bytes)
	}
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
	r.costTables(p)
	p("\n### Targets\n\n| target | measured | |\n|---|---|---|\n")
	for _, c := range r.checks() {
		mark := "met"
		switch {
		case c.skip != "":
			mark = "not measured (" + c.skip + ")"
		case !c.ok:
			mark = "**missed**"
		}
		p("| %s | %s | %s |\n", c.what, c.got, mark)
	}
	return b.String()
}

// costTables renders cost: the CPU by pools, and the profile's parts.
func (r *report) costTables(p func(string, ...any)) {
	if len(r.cost.pools) > 0 {
		p("\n| meterproxy on Redis with | CPU idle, a second | CPU per request at %d/s | p50 at %d/s | errors / requests |\n|---|---|---|---|---|\n", goalRate, goalRate)
		for _, c := range r.cost.pools {
			noun := "pools"
			if c.pools == 1 {
				noun = "pool"
			}
			p("| %d %s | %.1f ms | %s | %s | %d / %d |\n", c.pools, noun, float64(c.idleCPU)/float64(time.Millisecond),
				us(c.atRate.cpuPerReq), us(c.atRate.p50), c.atRate.errors, c.atRate.requests)
		}
	}
	if len(r.cost.profile) > 0 {
		p("\n| share of meterproxy's CPU (Redis store, closed loop, from its CPU profile; a sample in two parts counts in both) | |\n|---|---|\n")
		for _, s := range r.cost.profile {
			p("| %s | %.1f%% |\n", s.what, 100*s.share)
		}
	}
}
