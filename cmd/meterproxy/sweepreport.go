package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meterproxy/meterproxy/proxy/capacity"
)

// sweepResult is a finished (or interrupted) sweep: its steps in rising
// concurrency, why it stopped, and its wall time.
type sweepResult struct {
	sweep
	steps []step
	stop  string
	wall  time.Duration
}

// print writes the header, the table with the knee marked, the knee and
// the recommended bound with their rule, why the ramp stopped, and what
// it spent.
func (r sweepResult) print(w io.Writer) error {
	at, best, ok := knee(r.steps)
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(tw, format+"\n", args...) }
	p("sweep: %s", r.header())
	p("")
	p("concurrency\tcompletions/min\toutput tokens/s\tp50\tp99\terrors\t")
	for i, s := range r.steps {
		p("%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s", s.concurrency, s.completionsPerMin, s.outputTokensPerSec,
			fmtLatency(s.p50), fmtLatency(s.p99), fmtErrors(s.errors), r.mark(i, at, best, ok))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for line := range strings.Lines(table.String()) { // the empty mark column pads the rest
		b.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	b.WriteString("\n")
	r.writeKnee(&b, at, best, ok)
	r.writeStop(&b)
	r.writeSpent(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// mark is the table's last column for step i.
func (r sweepResult) mark(i, at, best int, ok bool) string {
	s := r.steps[i]
	switch {
	case s.interrupted:
		return "interrupted"
	case s.rateLimited:
		return "429: stopped here"
	case r.stop == stopLimit && i == len(r.steps)-1:
		return "past the rate limit: stopped here"
	case ok && i == at && r.bound(at) == s.concurrency:
		return "<- knee = recommended bound"
	case ok && i == at:
		return "<- knee"
	case ok && i == best:
		return "best"
	}
	return ""
}

// bound is the bound recommended when the knee is step at: the knee, or
// less where the provider's rate limit binds first (limitBound), never
// below 1.
func (r sweepResult) bound(at int) int {
	k := r.steps[at]
	_, lim, limited := sweptLimits(r.target.api, r.steps)
	if !limited || k.completionsPerMin <= lim.perMin {
		return k.concurrency
	}
	c, _ := limitBound(r.steps, lim.perMin)
	return max(1, min(c, k.concurrency))
}

// writeKnee states the knee, its rule, the provider's rate limit when
// its headers reported one, the bound recommended and what to configure.
func (r sweepResult) writeKnee(b *strings.Builder, at, best int, ok bool) {
	all, lim, limited := sweptLimits(r.target.api, r.steps)
	if !ok {
		b.WriteString("knee: none: no step ran its whole duration with an answer\n")
		return
	}
	k, top := r.steps[at], r.steps[best]
	fmt.Fprintf(b, "knee: concurrency %d, the smallest whose completions a minute reach %.0f%% of the best seen (%.0f at %d)\n",
		k.concurrency, kneeShare*100, top.completionsPerMin, top.concurrency)
	if limited {
		fmt.Fprintf(b, "rate limit: %s, the smallest the provider's headers reported\n", lim)
	}
	bound := r.bound(at)
	last := lastComplete(r.steps)
	switch {
	case limited && k.completionsPerMin > lim.perMin:
		r.writeLimitBound(b, bound, k, lim)
	case r.stop == stopRateLimited && at == last:
		fmt.Fprintf(b, "recommended bound: %d, the last concurrency before the 429: the provider's rate limit binds before the server's knee\n", k.concurrency)
	case at == last && len(r.steps) > 1:
		raise := ""
		if r.stop == stopMax {
			raise = " (raise --max)"
		}
		fmt.Fprintf(b, "recommended bound: %d, the knee; but throughput still grew at the last complete step: the knee may lie higher%s\n", k.concurrency, raise)
	default:
		fmt.Fprintf(b, "recommended bound: %d, the knee: more in flight adds latency, not throughput\n", k.concurrency)
	}
	if limited && k.completionsPerMin <= lim.perMin {
		fmt.Fprintf(b, "the bound's %.0f completions a minute stay within the provider's rate limit: the server's capacity binds, not the rate\n", k.completionsPerMin)
	}
	fmt.Fprintf(b, "config: %s\n", strings.Join(all.configLines(bound), ", "))
}

// writeLimitBound states a bound the provider's rate limit lim sets below
// the server's knee k: where the rate meets the limit, by Little's law.
func (r sweepResult) writeLimitBound(b *strings.Builder, bound int, k step, lim rateLimit) {
	c, w := limitBound(r.steps, lim.perMin)
	if c < 1 {
		fmt.Fprintf(b, "recommended bound: 1: even one request in flight (%s mean latency) sends more than the provider's rate limit allows; "+
			"the rate limit binds, not the server's capacity: let account.requests_per_minute hold the rate\n", fmtLatency(w))
		return
	}
	fmt.Fprintf(b, "recommended bound: %d, where the rate meets the limit: the provider's rate limit (%s) binds, not the server's capacity; "+
		"%d in flight at %s mean latency send about %.0f a minute, where %d sent %.0f\n",
		bound, lim, bound, fmtLatency(w), float64(bound)/w.Minutes(), k.concurrency, k.completionsPerMin)
}

// lastComplete is the index of the last complete step, or -1.
func lastComplete(steps []step) int {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].complete() {
			return i
		}
	}
	return -1
}

// writeStop says why the ramp ended.
func (r sweepResult) writeStop(b *strings.Builder) {
	last := r.steps[len(r.steps)-1]
	switch r.stop {
	case stopRateLimited:
		fmt.Fprintf(b, "stopped: the upstream answered 429 at concurrency %d (its rate limit binds); that step takes no part in the knee\n", last.concurrency)
	case stopFailed:
		fmt.Fprintf(b, "stopped: every request at concurrency %d failed (%s)", last.concurrency, fmtErrors(last.errors))
		if last.detail != "" {
			fmt.Fprintf(b, ": %s", last.detail)
		}
		b.WriteString("\n")
	case stopInterrupted:
		fmt.Fprintf(b, "stopped: interrupted at concurrency %d; that step takes no part in the knee\n", last.concurrency)
	case stopLimit:
		r.writeLimitStop(b, last)
	default:
		if last.concurrency == r.max {
			fmt.Fprintf(b, "stopped: --max %d reached\n", r.max)
		} else {
			fmt.Fprintf(b, "stopped: concurrency %d was the last step: the next would pass --max %d\n", last.concurrency, r.max)
		}
	}
}

// writeLimitStop says the ramp ended at step last, whose rate passed the
// provider's rate limit, and whether its step was long enough for the
// provider's burst to drain, that is for a 429 to come: a step shorter
// than that measures the burst, not a rate the provider sustains.
func (r sweepResult) writeLimitStop(b *strings.Builder, last step) {
	_, lim, _ := sweptLimits(r.target.api, r.steps)
	fmt.Fprintf(b, "stopped: concurrency %d sent %.0f completions a minute, past the provider's rate limit (%.0f requests/min); "+
		"higher steps would only spend its bucket\n", last.concurrency, last.completionsPerMin, lim.perMin)
	d, known := lim.drain(last)
	switch {
	case !known:
		fmt.Fprintf(b, "note: the provider reported no remaining count, so the sweep could not tell whether %s steps outlast its burst; "+
			"the limit in its headers binds whatever the table shows\n", r.duration)
	case d > r.duration:
		need := d.Round(time.Second) + time.Second
		fmt.Fprintf(b, "note: steps of %s are shorter than the provider's burst takes to drain at this rate "+
			"(%d %s left, %.0f requests/min past the limit: %s), so no 429 could come; the rate above the limit is the burst's, not sustained. "+
			"To see the 429, rerun with --start %d --max %d --duration %s\n",
			r.duration, last.limits[lim.dim].remaining, dimUnits[lim.dim], last.completionsPerMin-lim.perMin, d.Round(time.Second),
			last.concurrency, last.concurrency, need)
	}
}

// writeSpent says what the sweep cost: requests, tokens from the answers'
// usage, and wall time.
func (r sweepResult) writeSpent(b *strings.Builder) {
	var sent, estimated int
	var in, out int64
	for _, s := range r.steps {
		sent += s.sent
		estimated += s.estimated
		in += s.spent.Input
		out += s.spent.Output
	}
	fmt.Fprintf(b, "spent: %d requests, %d tokens (%d input + %d output), %s\n", sent, in+out, in, out, r.wall.Round(100*time.Millisecond))
	if estimated > 0 {
		fmt.Fprintf(b, "note: %d answers reported no usage; their tokens are estimated\n", estimated)
	}
}

// fmtLatency prints a latency to the millisecond, or - for none.
func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return capacity.FmtDuration(d)
}

// fmtErrors prints errors by kind, "0" for none: "429×1 timeout×2".
func fmtErrors(errs map[string]int) string {
	if len(errs) == 0 {
		return "0"
	}
	kinds := make([]string, 0, len(errs))
	for k := range errs {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s×%d", k, errs[k])
	}
	return strings.Join(kinds, " ")
}
