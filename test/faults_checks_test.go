//go:build faults

package test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// The fault suite's checks, which every fault case ends with: the
// accounting identity against the proxy's own counters, nothing left in
// flight or queued, and the proxy's goroutines back at their idle count.

// settleLimit bounds every wait for a proxy to settle after a fault: its
// counters to catch up with what the clients saw, its gauges to return to
// zero, its goroutines to their idle count.
const settleLimit = 15 * time.Second

// goroutineMargin is how far above its idle count a proxy's go_goroutines
// may stay once the clients and the upstream have closed every connection:
// a second admin connection of the scrapes (http.DefaultTransport keeps two
// alive) and a runtime worker. checkIdle polls, so goroutines still on
// their way out have settleLimit to go.
const goroutineMargin = 2

// reading is what the checks read from one scrape of a proxy.
type reading struct {
	forwarded  map[string]float64 // by code class
	refused    float64
	cancelled  float64
	reasons    map[string]float64 // meterproxy_refusals_total by reason
	negotiated map[string]float64 // meterproxy_negotiations_total by reason
	cutClient  float64
	cutUp      float64
	inFlight   float64 // this replica, both classes
	fleet      float64 // the fleet, both classes, at the store's last answer
	queued     float64
	goroutines float64
	fds        float64 // process_open_fds
	rss        float64
	degraded   float64
	storeErrs  float64 // meterproxy_store_errors_total
}

func read(m procs.Metrics) reading {
	r := reading{forwarded: map[string]float64{}, reasons: map[string]float64{}, negotiated: map[string]float64{}}
	for _, cc := range []string{"2xx", "3xx", "4xx", "5xx"} {
		r.forwarded[cc] = m.SumWhere("meterproxy_requests_total", func(l map[string]string) bool {
			return l["outcome"] == "forwarded" && len(l["code"]) == 3 && l["code"][0] == cc[0] // by code class
		})
	}
	r.refused = m.Sum("meterproxy_requests_total", map[string]string{"outcome": "refused"})
	r.cancelled = m.Sum("meterproxy_requests_total", map[string]string{"outcome": "cancelled"})
	for reason := range proxyReasons {
		r.reasons[reason] = m.Sum("meterproxy_refusals_total", map[string]string{"reason": reason})
	}
	for reason := range negotiationReasons {
		r.negotiated[reason] = m.Sum("meterproxy_negotiations_total", map[string]string{"reason": reason})
	}
	r.cutClient = m.Sum("meterproxy_responses_cut_short_total", map[string]string{"side": "client"})
	r.cutUp = m.Sum("meterproxy_responses_cut_short_total", map[string]string{"side": "upstream"})
	r.inFlight = m.Sum("meterproxy_in_flight", nil)
	r.fleet = m.Sum("meterproxy_fleet_in_flight", nil)
	r.queued = m.Sum("meterproxy_queue_depth", nil)
	r.goroutines = m.Sum("go_goroutines", nil)
	r.fds = m.Sum("process_open_fds", nil)
	r.rss = m.Sum("process_resident_memory_bytes", nil)
	r.degraded = m.Sum("meterproxy_store_degraded", nil)
	r.storeErrs = m.Sum("meterproxy_store_errors_total", nil)
	return r
}

// readProxy scrapes p once; it reports the error instead of failing, for
// polls that may run into a proxy shutting down.
func readProxy(ctx context.Context, adminURL string) (reading, error) {
	m, err := procs.Scrape(ctx, adminURL)
	if err != nil {
		return reading{}, err
	}
	return read(m), nil
}

func mustRead(t *testing.T, adminURL string) reading {
	t.Helper()
	return read(scrape(t, adminURL))
}

// idleSteady is how many readings in a row (settle's, 10 ms apart) a
// proxy's goroutine count must stay within idleJitter of itself for
// readIdle.
const idleSteady = 10

// idleJitter is how far an idle proxy's goroutine count moves on its own:
// one on Redis starts and ends a goroutine or two every few readings
// (18 ± 2 over 300 scrapes), so ten identical readings in a row may never
// come.
const idleJitter = 2

// readIdle is a proxy's idle reading, taken once its goroutine count has
// stayed within idleJitter for idleSteady readings, and the highest of
// them: the admitter's loops and the reload watcher start beside the
// listener, so a reading taken the moment the proxy serves may miss some
// of them — an idle of 13 goroutines where it is 18 failed a fresh
// clone's hostile-clients check with 19 at the end.
func readIdle(t *testing.T, adminURL string) reading {
	t.Helper()
	var window []reading
	r := settle(t, "the idle goroutines to hold still", adminURL, func(r reading) string {
		window = append(window, r)
		if len(window) > idleSteady {
			window = window[1:]
		}
		lo, hi := r.goroutines, r.goroutines
		for _, w := range window {
			lo, hi = min(lo, w.goroutines), max(hi, w.goroutines)
		}
		if len(window) < idleSteady || hi-lo > idleJitter {
			return fmt.Sprintf("goroutines %v to %v over the last %d readings", lo, hi, len(window))
		}
		return ""
	})
	for _, w := range window {
		r.goroutines = max(r.goroutines, w.goroutines)
	}
	return r
}

// arrived is how many requests of class the proxy has received since
// before: queued, in flight or ended. A request's slot is released when
// the upstream's answer ends, and the request is counted ended once its
// client has the answer: between the two (a moment, for a client that
// reads) the sum runs behind.
func arrived(m, before procs.Metrics, class string) int {
	c := map[string]string{"class": class}
	return int(m.Sum("meterproxy_queue_depth", c) + m.Sum("meterproxy_in_flight", c) +
		m.Sum("meterproxy_requests_total", c) - before.Sum("meterproxy_requests_total", c))
}

// identityDiff compares the proxy's counters with what its clients saw,
// less base (the counters before the run); "" when they agree.
func identityDiff(tl *tally, got, base reading) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var diffs []string
	for _, cc := range []string{"2xx", "3xx", "4xx", "5xx"} {
		if n := got.forwarded[cc] - base.forwarded[cc]; int(n) != tl.forwarded[cc] {
			diffs = append(diffs, fmt.Sprintf("forwarded %s: proxy %v, clients %d", cc, n, tl.forwarded[cc]))
		}
	}
	_, ref, _ := tl.totals()
	if n := got.refused - base.refused; int(n) != ref {
		diffs = append(diffs, fmt.Sprintf("refused: proxy %v, clients %d", n, ref))
	}
	for reason := range proxyReasons {
		if n := got.reasons[reason] - base.reasons[reason]; int(n) != tl.refused[reason] {
			diffs = append(diffs, fmt.Sprintf("refused %s: proxy %v, clients %d", reason, n, tl.refused[reason]))
		}
	}
	for reason := range negotiationReasons {
		if n := got.negotiated[reason] - base.negotiated[reason]; int(n) != tl.negotiated[reason] {
			diffs = append(diffs, fmt.Sprintf("negotiated %s: proxy %v, clients %d", reason, n, tl.negotiated[reason]))
		}
	}
	if n := got.cancelled - base.cancelled; int(n) != tl.cancelled {
		diffs = append(diffs, fmt.Sprintf("cancelled: proxy %v, clients %d", n, tl.cancelled))
	}
	if n := got.cutUp - base.cutUp; int(n) != tl.cutUpstream {
		diffs = append(diffs, fmt.Sprintf("cut short by the upstream: proxy %v, clients %d", n, tl.cutUpstream))
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// settle polls until cond reports "" (nothing wrong) and returns the last
// reading; past settleLimit it fails the test with cond's last complaint.
func settle(t *testing.T, what, adminURL string, cond func(reading) string) reading {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(settleLimit)
	for {
		r, err := readProxy(t.Context(), adminURL)
		var why string
		if err != nil {
			why = err.Error()
		} else if why = cond(r); why == "" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, settleLimit, why)
		}
		<-tick.C
	}
}

// checkIdentityOf waits until the proxy's counters agree with what its
// clients saw (they are taken as each response ends, so they may trail the
// clients by a moment), and requires the clients saw nothing the rules do
// not allow: every request forwarded, refused in JSON with its status, or
// cancelled by its client.
func checkIdentityOf(t *testing.T, name, adminURL string, tl *tally, base reading) reading {
	t.Helper()
	tl.mu.Lock()
	problems := slices.Clone(tl.problems)
	fwd, ref, neg := tl.totals()
	sum := fwd + ref + neg + tl.cancelled + tl.undelivered
	sent := tl.sent
	tl.mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("%s: answers the rules do not allow: %v", name, problems)
	}
	if sum != sent {
		t.Errorf("%s: the clients sent %d but %d ended", name, sent, sum)
	}
	r := settle(t, name+": the proxy's counters to agree with its clients ("+tl.String()+")", adminURL, func(r reading) string {
		return identityDiff(tl, r, base)
	})
	t.Logf("%s: %s; the proxy agrees", name, tl)
	return r
}

// checkIdle requires that the proxy logged no handler panic, and waits
// until it has nothing in flight, nothing queued, the fleet count it last
// heard is 0 and its goroutines are back within goroutineMargin of idle. The clients must have closed their connections,
// and the upstream its own (stop the fake provider first), or their
// goroutines count.
func checkIdle(t *testing.T, name string, p *procs.Proxy, idle reading) reading {
	t.Helper()
	checkNoPanics(t, name, p)
	r := settle(t, name+": in flight, queue and goroutines back to idle", p.AdminURL, func(r reading) string {
		if r.inFlight != 0 || r.fleet != 0 || r.queued != 0 || r.goroutines > idle.goroutines+goroutineMargin {
			return fmt.Sprintf("in flight %v, fleet in flight %v, queued %v, goroutines %v (idle %v + %d)",
				r.inFlight, r.fleet, r.queued, r.goroutines, idle.goroutines, goroutineMargin)
		}
		return ""
	})
	t.Logf("%s: in flight %v, fleet in flight %v, queued %v; goroutines %v (idle %v); RSS %.1f MiB (idle %.1f MiB)",
		name, r.inFlight, r.fleet, r.queued, r.goroutines, idle.goroutines, r.rss/(1<<20), idle.rss/(1<<20))
	return r
}

// checkNoPanics fails the test if p logged a panic in a handler: net/http
// recovers it and closes the connection without an answer, so the client
// sees a transport error and no counter moves. The server logs it at debug
// level, so the suite's replicas run with log.level debug.
func checkNoPanics(t *testing.T, name string, p *procs.Proxy) {
	t.Helper()
	for line := range strings.Lines(p.Logs()) {
		if strings.Contains(line, "panic serving") {
			t.Errorf("%s: a handler panicked: %s", name, tail(line, 1))
		}
	}
}
