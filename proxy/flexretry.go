package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
)

// flexSend is how an exchange's request is sent at the flex tier: set
// by prepare when it injected service_tier "flex", read by the retry
// loop (flexTry) and by the response's metering, all on the request's
// goroutine.
type flexSend struct {
	// plain is the body without the injected service_tier: what a
	// fallback to the default tier sends.
	plain []byte
	// fallback is the class's flex_fallback.
	fallback bool
	// unavailable says the answer passed on is flex's 429 Resource
	// Unavailable, max_wait having passed without capacity and no
	// fallback: not the account's rate limit (see observe).
	unavailable bool
}

// flexCarried reports whether ex's request can be sent at the flex tier
// at all. Only OpenAI's own API and Azure OpenAI have the tier, for Chat
// Completions and Responses over HTTP: never Anthropic (it has none),
// another OpenAI-compatible server (which may refuse the field), nor a
// WebSocket turn (flex's lack of capacity is retried, or fallen back
// from, over HTTP only: flexTry). Under mode: shadow nothing forwarded
// is changed.
func flexCarried(ex *exchange) bool {
	return !ex.live.Shadow && !ex.ask.socket && (ex.dialect == dialectOpenAI || ex.dialect == dialectAzure) &&
		(ex.rt.api == usage.ChatCompletions || ex.rt.api == usage.Responses)
}

// Backoff between retries of a flex request the provider had no capacity
// for. OpenAI's advice is exponential backoff; capacity comes back as
// other flex requests finish, in seconds, so the first retry comes soon,
// and the wait is capped so a request is not left waiting long after
// capacity returned. Bulk's default max_wait (60s) allows about ten.
const (
	flexBackoffFirst = 500 * time.Millisecond
	flexBackoffMax   = 8 * time.Second
)

// maxFlexErrorBody bounds how much of a 429's body is read to tell flex's
// Resource Unavailable from a rate limit: OpenAI's error bodies are a few
// hundred bytes; a longer one is not read further (and is not it).
const maxFlexErrorBody = 16 << 10

// flexClock is the flex retry's time: now, the wait between two tries
// (sleep: d, or until ctx ends, its error then) and the wait picked for
// a backoff of d (jitter). Tests replace it (fakeTime).
type flexClock struct {
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(d time.Duration) time.Duration
}

// realFlexClock is the flex retry's time outside tests.
func realFlexClock() flexClock {
	return flexClock{now: time.Now, sleep: sleepCtx, jitter: equalJitter}
}

// flexStep is what an answer at flex calls for in the forward path's
// retry loop (Handler.roundTrip).
type flexStep int

const (
	// flexDone: the answer is not flex's lack of capacity, or it is and
	// is passed on (flexSend.unavailable): the loop's other rules decide.
	flexDone flexStep = iota
	// flexRetryAfter: retry the request at flex after the wait.
	flexRetryAfter
	// flexFallBack: resend it at the default tier (flex_fallback).
	flexFallBack
)

// flexTry is the retry loop's flex state at one account, afresh at each
// account the request goes to (a spill): a request sent at flex
// (destination.flex) whose answer is flex's 429 Resource Unavailable
// (flexUnavailable) is retried at flex with backoff until its class's
// max_wait ends (until: quota.Lease.Until); then it is resent at the
// default tier with flex_fallback, or the 429 is passed on. The retried
// answers reach neither the caller nor the upstream state (observe), and
// are counted in meterproxy_flex_retries_total. The in-flight slot stays
// held throughout: it is the same request.
type flexTry struct {
	until    time.Time
	backoff  time.Duration
	fellBack bool
}

// newFlexTry is the flex state of ex at its lease's account.
func newFlexTry(ex *exchange) flexTry {
	t := flexTry{backoff: flexBackoffFirst}
	if ex.tally.lease != nil {
		t.until = ex.tally.lease.Until()
	}
	return t
}

// next is what the answer to ex's request at flex — resp, or err — calls
// for, and the wait before a retry, at c's time.
func (t *flexTry) next(ex *exchange, resp *http.Response, err error, c flexClock) (flexStep, time.Duration) {
	if ex.dest.flex == nil || t.fellBack || err != nil || !flexUnavailable(resp) {
		return flexDone, 0
	}
	now := c.now()
	wait := c.jitter(t.backoff)
	if ra := ratelimit.Parse(resp.Header, now).RetryAfter; ra > wait {
		wait = min(ra, flexBackoffMax)
	}
	// The last wait is cut to the deadline and tried once more there: a
	// request is held for its whole max_wait, not up to a backoff short
	// of it.
	left := t.until.Sub(now)
	if left <= 0 {
		if !ex.dest.flex.fallback {
			ex.dest.flex.unavailable = true
			return flexDone, 0
		}
		t.fellBack = true
		return flexFallBack, 0
	}
	t.backoff = min(2*t.backoff, flexBackoffMax)
	return flexRetryAfter, min(wait, left)
}

// flexUnavailable reports whether resp is flex processing's 429 for lack
// of capacity — OpenAI: "a 429 Resource Unavailable error code. You will
// not be charged" — rather than a rate limit. The guide shows no body, so
// it matches what says so in OpenAI's error shape: error.code or
// error.type "resource_unavailable" (any case), or an error.message that
// contains "resource unavailable" or "resource not available" (any case);
// never an error.code that names a limit (rate_limit_exceeded,
// insufficient_quota), whatever its message. Up to maxFlexErrorBody of
// the body is read; resp's body reads whole afterwards all the same.
func flexUnavailable(resp *http.Response) bool {
	if resp.StatusCode != http.StatusTooManyRequests || resp.Body == nil {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxFlexErrorBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), errReader{err}, resp.Body), resp.Body}
	if err != nil {
		return false
	}
	e := gjson.GetBytes(head, "error")
	code, typ, msg := e.Get("code").String(), e.Get("type").String(), strings.ToLower(e.Get("message").String())
	switch {
	case strings.EqualFold(code, "rate_limit_exceeded"), strings.EqualFold(code, "insufficient_quota"):
		return false
	case strings.EqualFold(code, flexUnavailableCode), strings.EqualFold(typ, flexUnavailableCode):
		return true
	}
	return strings.Contains(msg, "resource unavailable") || strings.Contains(msg, "resource not available")
}

// flexUnavailableCode is the error code and type flexUnavailable takes
// for flex's Resource Unavailable.
const flexUnavailableCode = "resource_unavailable"

// errReader fails every read with its error; a nil error reads as EOF, so
// a body whose head was read whole goes on with the rest.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// drain reads what is left of a response not passed on (a few hundred
// bytes of error, bounded), so its connection is reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxFlexErrorBody))
	_ = resp.Body.Close()
}

// rewind is r to send again: the same request with its body afresh
// (setBody gives every metered request a GetBody).
func rewind(r *http.Request) (*http.Request, error) {
	if r.GetBody == nil {
		return nil, errors.New("proxy: a flex retry's body cannot be read again")
	}
	body, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Body = body
	return r2, nil
}

// withBody is r with body in place of its own.
func withBody(r *http.Request, body []byte) *http.Request {
	r2 := r.Clone(r.Context())
	setBody(r2, body)
	return r2
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// equalJitter is a wait between d/2 and d, so retries that failed
// together do not come back together.
func equalJitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1) //nolint:gosec // G404: spreading retries needs no secure randomness
}
