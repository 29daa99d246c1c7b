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
	case ok && i == at:
		return "<- knee = recommended bound"
	case ok && i == best:
		return "best"
	}
	return ""
}

// writeKnee states the knee, its rule, and the bound recommended.
func (r sweepResult) writeKnee(b *strings.Builder, at, best int, ok bool) {
	if !ok {
		b.WriteString("knee: none: no step ran its whole duration with an answer\n")
		return
	}
	k, top := r.steps[at], r.steps[best]
	fmt.Fprintf(b, "knee: concurrency %d, the smallest whose completions a minute reach %.0f%% of the best seen (%.0f at %d)\n",
		k.concurrency, kneeShare*100, top.completionsPerMin, top.concurrency)
	last := lastComplete(r.steps)
	switch {
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
	default:
		if last.concurrency == r.max {
			fmt.Fprintf(b, "stopped: --max %d reached\n", r.max)
		} else {
			fmt.Fprintf(b, "stopped: concurrency %d was the last step: the next would pass --max %d\n", last.concurrency, r.max)
		}
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
