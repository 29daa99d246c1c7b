package main

import (
	"fmt"
	"time"
)

// check is one of the targets. A check whose skip is set was not
// measured (nginx missing, or its rate not in -rates): it is neither met
// nor missed.
type check struct {
	what, got string
	ok        bool
	skip      string
}

// heldLimit is the memory a held request may cost beyond its body.
const heldLimit = 16 << 10

// checks are the targets: the goal's (against the baseline and
// nginx, and memory per held request), then the ones that say the figures
// mean anything (no errors, no stream cut short, the Redis store never
// degraded) and the Redis-commands and access-log targets.
func (r *report) checks() []check {
	cs := []check{
		r.ratioCheck("Redis store closed-loop throughput ≥ the baseline's", r.closed[shared].throughput, r.closed[base].throughput, 1, true),
		r.ratioCheck("Redis store CPU per request, closed loop, ≤ the baseline's",
			float64(r.closed[shared].cpuPerReq), float64(r.closed[base].cpuPerReq), 1, false),
	}
	cs = append(cs, r.nginxChecks()...)
	body := float64(len(chatBody))
	for _, h := range []struct {
		how string
		res heldResult
	}{{"HTTP/1.1", r.held}, {"h2c", r.heldH2C}} {
		over := h.res.perRequest() - body
		cs = append(cs, check{fmt.Sprintf("≤ 16 KiB per held request beyond its body (%s)", h.how),
			fmt.Sprintf("%.0f B (%.0f B with its %.0f B body)", over, h.res.perRequest(), body), over <= heldLimit, ""})
	}
	at := r.open[targetRate]
	redis := check{fmt.Sprintf("Redis commands per request at %d/s ≤ 0.5", targetRate),
		fmt.Sprintf("%.3f", at[shared].redisPerReq), at[shared].redisPerReq <= 0.5, ""}
	if !r.ran(targetRate) {
		redis.got, redis.skip = "–", fmt.Sprintf("%d not in -rates", targetRate)
	}
	cut := r.streams[local].cut + r.streams[shared].cut
	cs = append(cs, redis,
		check{"meterproxy streams cut short = 0", fmt.Sprint(cut), cut == 0, ""},
		check{"no meterproxy errors in any open-loop run", fmt.Sprint(r.openErrors()), r.openErrors() == 0, ""},
		check{"Redis store never degraded (0 store errors)", fmt.Sprintf("%.0f", r.storeErrors), r.storeErrors == 0, ""},
	)
	return append(cs, r.accessLogChecks()...)
}

// nginxChecks are the targets against nginx (Redis store): CPU per
// request within 2× nginx's closed loop and 3× at goalRate, and the p50
// added over a direct hit at goalRate at most 2× nginx's.
func (r *report) nginxChecks() []check {
	at := r.open[goalRate]
	added := func(n string) time.Duration { return at[n].p50 - at[direct].p50 }
	closed := r.ratioCheck("Redis store CPU per request ≤ 2× nginx's (closed loop)",
		float64(r.closed[shared].cpuPerReq), float64(r.closed[nginxName].cpuPerReq), 2, false)
	atRate := []check{
		r.ratioCheck(fmt.Sprintf("Redis store CPU per request at %d/s ≤ 3× nginx's", goalRate),
			float64(at[shared].cpuPerReq), float64(at[nginxName].cpuPerReq), 3, false),
		{what: fmt.Sprintf("Redis store added p50 over a direct hit at %d/s ≤ 2× nginx's", goalRate),
			got: fmt.Sprintf("%s against nginx's %s", us(added(shared)), us(added(nginxName))),
			ok:  added(shared) <= 2*added(nginxName)},
	}
	skip := func(c *check, why string) { c.got, c.ok, c.skip = "–", false, why }
	if !r.nginxRan {
		skip(&closed, "nginx "+r.nginx)
	}
	for i := range atRate {
		switch {
		case !r.nginxRan:
			skip(&atRate[i], "nginx "+r.nginx)
		case !r.ran(goalRate):
			skip(&atRate[i], fmt.Sprintf("%d not in -rates", goalRate))
		}
	}
	return append([]check{closed}, atRate...)
}

// ratioCheck is the target a/b ≥ limit (atLeast) or ≤ limit.
func (r *report) ratioCheck(what string, a, b, limit float64, atLeast bool) check {
	if b == 0 {
		return check{what, "–", false, "no figure to compare with"}
	}
	q := a / b
	ok := q <= limit
	if atLeast {
		ok = q >= limit
	}
	return check{what, fmt.Sprintf("%.2f×", q), ok, ""}
}

func (r *report) openErrors() uint64 {
	var n uint64
	for _, runs := range r.open {
		n += runs[local].errors + runs[shared].errors + runs[logged].errors
	}
	return n
}

// missed names the targets not met; notMeasured the targets the run could
// not measure, with why.
func (r *report) missed() (missed, notMeasured []string) {
	for _, c := range r.checks() {
		switch {
		case c.skip != "":
			notMeasured = append(notMeasured, c.what+" ("+c.skip+")")
		case !c.ok:
			missed = append(missed, c.what+" ("+c.got+")")
		}
	}
	return missed, notMeasured
}
