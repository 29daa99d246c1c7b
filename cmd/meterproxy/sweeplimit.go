package main

import (
	"fmt"
	"math"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
)

// limitDim is one dimension of the provider's rate limit: requests, or
// tokens (combined, input or output) a minute.
type limitDim int

// The dimensions, in the order of providerLimits.
const (
	dimRequests limitDim = iota
	dimTokens
	dimInput
	dimOutput
)

// dimHeaders name each dimension's limit header, OpenAI's spelling then
// Anthropic's ("" where the API sends none the sweep reads).
var dimHeaders = [...][2]string{
	dimRequests: {"x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit"},
	dimTokens:   {"x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit"},
	dimInput:    {"", "anthropic-ratelimit-input-tokens-limit"},
	dimOutput:   {"", "anthropic-ratelimit-output-tokens-limit"},
}

// dimUnits are what each dimension counts.
var dimUnits = [...]string{dimRequests: "requests", dimTokens: "tokens", dimInput: "input tokens", dimOutput: "output tokens"}

// seenLimit is what answers said of one dimension: the smallest limit
// and the largest remaining count, each -1 when none was reported.
type seenLimit struct{ limit, remaining int64 }

// providerLimits are the provider's limits a step's (or the sweep's)
// answers reported, indexed by limitDim, each a minute's
// (ratelimit.ParseMinute).
type providerLimits [4]seenLimit

// noLimits is providerLimits with nothing reported.
func noLimits() providerLimits {
	var l providerLimits
	for i := range l {
		l[i] = seenLimit{limit: -1, remaining: -1}
	}
	return l
}

// observe takes in what one answer's headers said.
func (l *providerLimits) observe(o ratelimit.Observation) {
	for i, b := range [...]ratelimit.Bucket{o.Requests, o.Tokens, o.InputTokens, o.OutputTokens} {
		l[i].take(b.Limit, b.Remaining)
	}
}

// merge takes in what another step's answers said.
func (l *providerLimits) merge(m providerLimits) {
	for i, s := range m {
		l[i].take(s.limit, s.remaining)
	}
}

// take keeps the smaller limit and, while a limit is known, the larger
// remaining count.
func (s *seenLimit) take(limit, remaining int64) {
	if limit <= 0 {
		return
	}
	if s.limit < 0 || limit < s.limit {
		s.limit = limit
	}
	s.remaining = max(s.remaining, remaining)
}

// rateLimit is the provider's limit that binds the sweep's rate: of the
// dimensions reported, the one allowing the fewest requests a minute.
type rateLimit struct {
	dim   limitDim
	limit int64 // the dimension's units a minute, as the header said
	// perRequest is what one request uses of the dimension: 1 request, or
	// its mean tokens from the answers' usage.
	perRequest float64
	perMin     float64 // requests a minute the limit allows: limit ÷ perRequest
	header     string
}

// binding is the binding limit of l for answers to api that used in
// input and out output tokens each on average; ok is false when no
// dimension was reported (or only token limits, with no usage to turn
// them into requests).
func (l providerLimits) binding(api usage.API, in, out float64) (lim rateLimit, ok bool) {
	use := [...]float64{dimRequests: 1, dimTokens: in + out, dimInput: in, dimOutput: out}
	spelling := 0
	if api == usage.Messages {
		spelling = 1
	}
	for d, s := range l {
		if s.limit <= 0 || !(use[d] > 0) {
			continue
		}
		perMin := float64(s.limit) / use[d]
		if !ok || perMin < lim.perMin {
			header := dimHeaders[d][spelling]
			if header == "" {
				header = dimHeaders[d][1]
			}
			lim, ok = rateLimit{dim: limitDim(d), limit: s.limit, perRequest: use[d], perMin: perMin, header: header}, true
		}
	}
	return lim, ok
}

// String says the limit and where it came from: "600 requests/min from
// x-ratelimit-limit-requests", a token limit with the requests it allows.
func (lim rateLimit) String() string {
	s := fmt.Sprintf("%d %s/min from %s", lim.limit, dimUnits[lim.dim], lim.header)
	if lim.dim != dimRequests {
		s += fmt.Sprintf(", about %.0f requests/min at %.0f %s a request (from the answers' usage)", lim.perMin, lim.perRequest, dimUnits[lim.dim])
	}
	return s
}

// limitBound is the concurrency at which the rate meets perMin by
// Little's law, perMin × W with W the mean latency in minutes, rounded
// down so the rate stays within it, and the latency used: that of the
// highest complete step whose rate stayed within the limit (the first
// measured step's when none did), the server's latency near that load.
// It is 0 when even one request in flight would pass the limit.
func limitBound(steps []step, perMin float64) (int, time.Duration) {
	var w time.Duration
	for _, s := range steps {
		if s.mean <= 0 || !s.complete() {
			continue
		}
		if w == 0 || s.completionsPerMin <= perMin {
			w = s.mean
		}
		if s.completionsPerMin > perMin {
			break
		}
	}
	if w == 0 {
		return 0, 0
	}
	return int(math.Floor(perMin*w.Minutes() + 1e-9)), w
}

// drain is how long step s's rate took to empty the provider's bucket
// of lim at the step's start: its remaining count (the largest the step
// saw, in requests) over the rate by which s passed the limit. ok is
// false when s stayed within the limit or no remaining count came.
func (lim rateLimit) drain(s step) (time.Duration, bool) {
	left, over := s.limits[lim.dim].remaining, s.completionsPerMin-lim.perMin
	if left < 0 || !(over > 0) {
		return 0, false
	}
	minutes := float64(left) / lim.perRequest / over
	return min(time.Duration(minutes*float64(time.Minute)), ratelimit.MaxDuration), true
}

// configLines are the account keys the limits and the bound fill, as
// docs/configuration.md names them: max_in_flight, and each limit the
// provider reported (tokens_per_minute is Anthropic's input budget when
// it reports one).
func (l providerLimits) configLines(bound int) []string {
	lines := []string{fmt.Sprintf("account.max_in_flight: %d", bound)}
	add := func(key string, d limitDim) bool {
		if l[d].limit > 0 {
			lines = append(lines, fmt.Sprintf("account.%s: %d", key, l[d].limit))
			return true
		}
		return false
	}
	add("requests_per_minute", dimRequests)
	if !add("tokens_per_minute", dimInput) {
		add("tokens_per_minute", dimTokens)
	}
	add("output_tokens_per_minute", dimOutput)
	return lines
}

// sweptLimits are the limits every step's answers reported, and the one
// binding at the answers' mean usage (ok false when none binds).
func sweptLimits(api usage.API, steps []step) (all providerLimits, lim rateLimit, ok bool) {
	all = noLimits()
	var answered int
	var in, out int64
	for _, s := range steps {
		all.merge(s.limits)
		answered += s.answered
		in += s.spent.Input
		out += s.spent.Output
	}
	var meanIn, meanOut float64
	if answered > 0 {
		meanIn, meanOut = float64(in)/float64(answered), float64(out)/float64(answered)
	}
	lim, ok = all.binding(api, meanIn, meanOut)
	return all, lim, ok
}

// pastLimit reports whether the last of steps sent more completions a
// minute than the provider's headers allow: no higher step can change the
// bound (the limit binds below it), and each would only spend the
// provider's bucket.
func pastLimit(api usage.API, steps []step) bool {
	_, lim, ok := sweptLimits(api, steps)
	return ok && len(steps) > 0 && steps[len(steps)-1].completionsPerMin > lim.perMin
}
