package fakeprovider

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Dialect is the OpenAI-compatible host whose words the provider speaks
// on its OpenAI paths (Config.Dialect): the same bodies, that host's
// rate-limit headers, the spans of its buckets, and its own ways of
// answering (docs/providers.md lists what each host sends):
//
//   - DialectTogether: x-ratelimit-{limit,remaining,reset} (requests a
//     second, the reset in seconds) and x-tokenlimit-{limit,remaining}
//     (tokens a second); its buckets hold one second's worth (Config.RPM
//     and Config.TPM ÷ 60), refilled continuously;
//   - DialectFireworks: OpenAI's request headers (a minute's bucket) and
//     x-ratelimit-{limit,remaining}-tokens-{prompt,generated}, tokens a
//     second by direction (Config.TPM and Config.OutputTPM ÷ 60): the
//     prompt charged on arrival, the generated tokens as the answer ends,
//     neither ever refused — past either bucket the request is served,
//     with x-ratelimit-over-limit: yes, as Fireworks serves an account
//     over its rate at lower priority;
//   - DialectMistral: x-ratelimitbysize-{limit,remaining}-minute, tokens
//     a minute; no request counts (Config.RPM still refuses);
//   - DialectGroq: OpenAI's names, requests a day (the requests bucket
//     holds 1,440 minutes of Config.RPM) and tokens a minute, resets as
//     fractional Go durations to the hundredth of a second (7.66s,
//     2m59.56s);
//   - DialectDeepSeek: no rate-limit headers; while a request queues
//     (Config.Latency) the answer has begun, 200, and the wait is filled
//     every Config.KeepAlive with ": keep-alive" SSE comments (a stream)
//     or empty lines (JSON), as DeepSeek keeps a queued connection open.
//
// The zero Dialect is OpenAI's own (and Azure's and Anthropic's on their
// paths). Config.OverCapacity answers 503 whatever the dialect, in
// Together's words with DialectTogether.
type Dialect string

// The dialects the provider speaks.
const (
	DialectOpenAI    Dialect = ""
	DialectTogether  Dialect = "together"
	DialectFireworks Dialect = "fireworks"
	DialectMistral   Dialect = "mistral"
	DialectGroq      Dialect = "groq"
	DialectDeepSeek  Dialect = "deepseek"
)

// DefaultKeepAlive is Config.KeepAlive when zero: how often DialectDeepSeek
// fills a queued request's wait.
const DefaultKeepAlive = time.Second

// overCapacityMessage is the provider's answer to a request its model has
// no capacity for: 503, in OpenAI's error shape, in Together's words
// ("Engine Overloaded").
const overCapacityMessage = "The server is overloaded or not ready yet. The model is over capacity: please try again later."

// ParseDialect reads a dialect's name; "" and "openai" are OpenAI's own.
func ParseDialect(s string) (Dialect, error) {
	switch d := Dialect(s); d {
	case DialectOpenAI, DialectTogether, DialectFireworks, DialectMistral, DialectGroq, DialectDeepSeek:
		return d, nil
	case "openai":
		return DialectOpenAI, nil
	}
	return "", fmt.Errorf("fakeprovider: dialect %q: want openai, together, fireworks, mistral, groq or deepseek", s)
}

// spans are how much of each bucket's per-minute rate it holds when
// full under d: a second's (Together's requests and tokens, Fireworks'
// tokens), a day's (Groq's requests), else a minute's.
func (d Dialect) spans() (requests, tokens, output time.Duration) {
	switch d {
	case DialectTogether:
		return time.Second, time.Second, time.Minute
	case DialectFireworks:
		return time.Minute, time.Second, time.Second
	case DialectGroq:
		return 24 * time.Hour, time.Minute, time.Minute
	}
	return time.Minute, time.Minute, time.Minute
}

// newSpanBucket is newBucket for a bucket that holds span's worth of
// perMinute when full (Dialect.spans); fixed windows, when set, win.
func newSpanBucket(perMinute int, window, span time.Duration) bucket {
	b := newBucket(perMinute, window)
	if window == 0 && span != time.Minute {
		b.full = b.capacity * span.Seconds() / 60
		b.level = b.full
	}
	return b
}

// setDialectLimitHeaders writes the rate-limit headers of x's dialect on
// an OpenAI path, and reports whether it did (false: OpenAI's own).
func (x *exchange) setDialectLimitHeaders(h http.Header) bool {
	a := x.arr
	switch x.p.cfg.Dialect {
	case DialectTogether:
		setSpanHeaders(h, a.requests, "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", seconds)
		setSpanHeaders(h, a.tokens, "x-tokenlimit-limit", "x-tokenlimit-remaining", "", nil)
	case DialectFireworks:
		setOpenAILimitHeaders(h, a.requests, limitState{})
		setSpanHeaders(h, a.tokens, "x-ratelimit-limit-tokens-prompt", "x-ratelimit-remaining-tokens-prompt", "", nil)
		setSpanHeaders(h, a.output, "x-ratelimit-limit-tokens-generated", "x-ratelimit-remaining-tokens-generated", "", nil)
		if a.tokens.over || a.output.over {
			h.Set("x-ratelimit-over-limit", "yes")
		}
	case DialectMistral:
		setSpanHeaders(h, a.tokens, "x-ratelimitbysize-limit-minute", "x-ratelimitbysize-remaining-minute", "", nil)
	case DialectGroq:
		setSpanHeaders(h, a.requests, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", hundredths)
		setSpanHeaders(h, a.tokens, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens", hundredths)
	case DialectDeepSeek:
	default:
		return false
	}
	return true
}

// setSpanHeaders writes one bucket's limit and remaining as its dialect
// counts them — over the bucket's span, what it holds full and what it
// holds now — and, with format, the time until it is full. Nothing for
// an unlimited bucket.
func setSpanHeaders(h http.Header, st limitState, limit, remaining, reset string, format func(time.Duration) string) {
	if st.limit == 0 {
		return
	}
	h.Set(limit, strconv.Itoa(st.full))
	h.Set(remaining, strconv.Itoa(st.left))
	if format != nil {
		h.Set(reset, format(st.untilFull))
	}
}

// seconds is d in seconds, to the millisecond (Together's reset: "0.1").
func seconds(d time.Duration) string {
	return strconv.FormatFloat(math.Ceil(d.Seconds()*1000)/1000, 'f', -1, 64)
}

// hundredths is d as a Go duration rounded up to the hundredth of a
// second, as Groq sends it (7.66s, 2m59.56s).
func hundredths(d time.Duration) string {
	const c = 10 * time.Millisecond
	return ((d + c - 1) / c * c).String()
}

// limitFireworks debits a's buckets as Fireworks does (p.mu held): the
// request bucket refuses as OpenAI's does; the prompt is owed to the
// prompt bucket on arrival, never refused, and the generated bucket is
// read as it stands (chargeGenerated owes it as the answer ends).
func (p *Provider) limitFireworks(a *arrival, lim *limits, prompt int, now time.Time) {
	a.admitted, a.requests = lim.requests.admit(now)
	if a.admitted {
		lim.tokens.owe(now, prompt)
		a.rec.TokensCharged = prompt
	}
	a.tokens, a.output = lim.tokens.stateAt(now), lim.output.stateAt(now)
	if a.tokens.limit > 0 {
		a.rec.TokensRemaining = int(math.Floor(math.Max(lim.tokens.level, 0)))
	}
}

// chargeGenerated owes the output tokens of x's answer to Fireworks'
// generated bucket as the answer ends.
func (x *exchange) chargeGenerated() {
	if x.p.cfg.Dialect != DialectFireworks || x.usage == nil || x.arr.limits == nil {
		return
	}
	x.p.mu.Lock()
	defer x.p.mu.Unlock()
	if x.arr.gen == x.p.gen {
		x.arr.limits.output.owe(x.now, x.usage.OutputTokens)
		x.arr.rec.OutputCharged += x.usage.OutputTokens
	}
}

// SetOverCapacity sets the share of requests, 0..1, answered 503 because
// the model is over capacity from now on (Config.OverCapacity at start):
// the provider's capacity, not the caller's rate, which Together tells
// apart (503 against 429). Counted over the requests admitted by the rate
// limit, not drawn at random, as SetFlexUnavailable's share is; the
// request was debited like any other.
func (p *Provider) SetOverCapacity(share float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.capacity.share, p.capacity.seen = clampShare(share), 0
}

// capacityFault is Config.OverCapacity's state: the share and the
// admitted requests seen since it was set.
type capacityFault struct {
	share float64
	seen  uint64
}

// overCapacity answers x 503 when the share of over-capacity answers
// says so, and reports whether it did.
func (x *exchange) overCapacity() bool {
	p := x.p
	p.mu.Lock()
	c := &p.capacity
	c.seen++
	n := float64(c.seen)
	refuse := c.share > 0 && math.Floor(n*c.share) > math.Floor((n-1)*c.share)
	p.mu.Unlock()
	if !refuse {
		return false
	}
	x.fail(http.StatusServiceUnavailable, overCapacityMessage)
	return true
}

// queue waits d before x is answered, as wait does; under DialectDeepSeek
// the answer begins at once on an OpenAI path, 200, and the wait is
// filled with keep-alives (queueKeepingAlive).
func (x *exchange) queue(d time.Duration) bool {
	if x.p.cfg.Dialect != DialectDeepSeek || x.api != openAI || x.sink != nil || d <= 0 {
		return x.wait(d)
	}
	return x.queueKeepingAlive(d)
}

// queueKeepingAlive writes 200 and, every Config.KeepAlive for d, an SSE
// comment ": keep-alive" and its empty line (a stream: the body asks
// "stream": true) or an empty line (JSON), as DeepSeek keeps a queued
// request's connection open; the answer that follows writes no status
// of its own (begun). It reports false if the client went away.
func (x *exchange) queueKeepingAlive(d time.Duration) bool {
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = decodeLenient(x.body, &req)
	line, ctype := "\n", "application/json"
	if req.Stream {
		line, ctype = ": keep-alive\n\n", "text/event-stream"
	}
	x.w.Header().Set("Content-Type", ctype)
	b := &begun{ResponseWriter: x.w}
	x.w = b
	b.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(b)
	_ = rc.Flush()
	every := x.p.cfg.KeepAlive
	if every <= 0 {
		every = DefaultKeepAlive
	}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if !x.wait(min(every, left)) {
			return false
		}
		if left <= every {
			return true
		}
		if _, err := b.Write([]byte(line)); err != nil || rc.Flush() != nil {
			return false
		}
	}
}

// begun is a response whose status was written: later WriteHeader calls
// (the answer's own) change nothing.
type begun struct {
	http.ResponseWriter
	wrote bool
}

// WriteHeader writes status the first time only.
func (b *begun) WriteHeader(status int) {
	if !b.wrote {
		b.wrote = true
		b.ResponseWriter.WriteHeader(status)
	}
}

// Unwrap is the response beneath, for http.ResponseController.
func (b *begun) Unwrap() http.ResponseWriter { return b.ResponseWriter }
