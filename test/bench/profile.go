package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// shareOf names a part of a CPU profile and how a stack is told to be in
// it: a frame whose function is named so, or begins with a prefix.
type shareOf struct {
	what     string
	names    []string
	prefixes []string
}

// profileShares are the parts make bench reports of meterproxy's CPU
// profile under closed-loop load: what goroutine hand-offs cost (the
// scheduler finding the next goroutine to run), what allocation and the
// garbage collector cost, and the system calls.
var profileShares = []shareOf{
	{what: "scheduler (runtime.schedule, findRunnable: goroutine hand-offs, parking, waking)", names: []string{"runtime.schedule", "runtime.findRunnable"}},
	{what: "garbage collection (runtime.gcBgMarkWorker, assists)", names: []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc"}},
	{what: "allocation (runtime.mallocgc)", names: []string{"runtime.mallocgc"}},
	{what: "system calls", prefixes: []string{"syscall.", "internal/runtime/syscall."}},
}

// shareResult is one part's share of the profile's CPU time.
type shareResult struct {
	what  string
	share float64
}

// profileRun takes a CPU profile of t over a closed-loop run of d and
// returns profileShares' parts of it.
func profileRun(ctx context.Context, t *target, d time.Duration, conns int) ([]shareResult, error) {
	type fetched struct {
		p   *profile.Profile
		err error
	}
	got := make(chan fetched, 1)
	go func() {
		p, err := fetchProfile(ctx, t.adminURL, d)
		got <- fetched{p, err}
	}()
	closedLoop(t, d+time.Second, conns) // load over the whole profiled span
	f := <-got
	if f.err != nil {
		return nil, f.err
	}
	return shares(f.p, profileShares), nil
}

// fetchProfile reads /debug/pprof/profile for d from an admin listener.
func fetchProfile(ctx context.Context, adminURL string, d time.Duration) (*profile.Profile, error) {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", adminURL, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return profile.Parse(resp.Body)
}

// shares is each part's share of p's CPU time: the samples with a frame
// in it, each counted once, over all samples.
func shares(p *profile.Profile, parts []shareOf) []shareResult {
	idx := len(p.SampleType) - 1 // cpu nanoseconds, after the sample count
	var total int64
	sums := make([]int64, len(parts))
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		for i, part := range parts {
			if part.inStack(s) {
				sums[i] += v
			}
		}
	}
	out := make([]shareResult, len(parts))
	for i, part := range parts {
		out[i] = shareResult{what: part.what}
		if total > 0 {
			out[i].share = float64(sums[i]) / float64(total)
		}
	}
	return out
}

// inStack reports whether one of s's frames is in the part.
func (part shareOf) inStack(s *profile.Sample) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			name := line.Function.Name
			for _, n := range part.names {
				if name == n {
					return true
				}
			}
			for _, pre := range part.prefixes {
				if strings.HasPrefix(name, pre) {
					return true
				}
			}
		}
	}
	return false
}
