//go:build faults

package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The fault suite's load: single requests, a paced load generator over
// many clients, and streams held open.

// streamBody asks for a streamed chat completion.
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// errHung is the cause of a request that outlived hangLimit: the rules
// promise an answer within max_wait and the upstream timeout, never a hang.
var errHung = errors.New("no answer within the test's hang limit")

// errLeft is the error of a request whose client went away on purpose.
var errLeft = errors.New("the client went away")

// hangLimit bounds every request the suite sends.
const hangLimit = 90 * time.Second

// shot is one request to send.
type shot struct {
	url     string
	body    string
	headers map[string]string
	// leaveAfter, when positive, makes the client read that many data:
	// lines of a streamed answer and then go away.
	leaveAfter int
	// chunked sends the body without a Content-Length.
	chunked bool
	// refusedUnread is the refusal a proxy gives this request before it
	// reads its body whole (body_too_large): when the client is still
	// writing the body as the proxy, its answer sent and its linger over,
	// closes the connection, the client's write fails (broken pipe, reset)
	// and its TCP stack drops the answer unread. That failure is then the
	// refusal the proxy counted, as an HTTP/1.1 client without Expect:
	// 100-continue sees it on a loaded machine (the soak, 1 of 1,760).
	refusedUnread string
}

func (s shot) request(ctx context.Context) *http.Request {
	var body io.Reader = strings.NewReader(s.body)
	if s.chunked {
		body = io.MultiReader(body) // hides the length: sent chunked
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, body)
	if err != nil {
		panic(err) // every URL here is built by the test
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	return req
}

// fire sends s and returns how it ended. leave, when not nil, is closed
// by the caller to make the client go away before any answer; the request
// is otherwise never cancelled.
func fire(client *http.Client, s shot, leave <-chan struct{}) answer {
	ctx, cancel := context.WithTimeoutCause(context.Background(), hangLimit, errHung)
	defer cancel()
	conn := "no connection"
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		conn = fmt.Sprintf("connection %s, new", i.Conn.LocalAddr())
		if i.Reused {
			conn = fmt.Sprintf("connection %s reused after %s idle", i.Conn.LocalAddr(), i.IdleTime)
		}
	}})
	if leave != nil {
		done := ctx.Done()
		go func() {
			select {
			case <-leave:
				cancel()
			case <-done:
			}
		}()
	}
	res, err := client.Do(s.request(ctx))
	if err != nil {
		a := answer{err: err, left: ctx.Err() != nil, hung: errors.Is(context.Cause(ctx), errHung), conn: conn}
		if s.refusedUnread != "" && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
			a.refusedUnread = s.refusedUnread
		}
		return a
	}
	defer func() { _ = res.Body.Close() }()
	a := answer{status: res.StatusCode, header: res.Header, conn: conn}
	if s.leaveAfter <= 0 {
		a.body, a.err = io.ReadAll(res.Body)
		a.hung = errors.Is(context.Cause(ctx), errHung)
		return a
	}
	br := bufio.NewReader(res.Body)
	var buf bytes.Buffer
	for seen := 0; seen < s.leaveAfter; {
		line, err := br.ReadString('\n')
		buf.WriteString(line)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil // a whole answer (a refusal, or a stream shorter than leaveAfter)
			}
			a.body, a.err = buf.Bytes(), err
			return a
		}
		if strings.HasPrefix(line, "data:") {
			seen++
		}
	}
	cancel() // the client goes away mid-stream
	a.body, a.err, a.left = buf.Bytes(), context.Canceled, true
	return a
}

// seeded returns a PCG generator with a fixed seed, logged: each case draws
// the same kinds, orders and moments on every run.
func seeded(t *testing.T, seed uint64) *rand.Rand {
	t.Logf("random seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // G404: seeded on purpose, so a run can be replayed
}

// loadClient is newClient for many proxies at once. http.DefaultTransport
// keeps at most 100 idle connections over all hosts, which under a load
// spread over several proxies would close and redial connections all the
// time: the limit is per host only. Idle connections are dropped after
// 5 s, within meterproxy's server.ReadHeaderTimeout (10 s): a connection
// the transport dialed but never used (it lost a dial race) is closed by
// the server 10 s after it was accepted, and a POST sent into it as it
// closes fails with EOF — an HTTP/1.1 keep-alive race any client must
// avoid or retry, not a fault of the proxy's.
func loadClient(t *testing.T, conns int) *http.Client {
	c := newClient(t, conns)
	tr := c.Transport.(*http.Transport)
	tr.MaxIdleConns = 0
	tr.IdleConnTimeout = 5 * time.Second
	return c
}

// loader sends shots at a steady rate, each from a goroutine of its own,
// at most maxConc at once: a shot that finds them all busy is skipped and
// counted, so a stalled proxy cannot make the test pile up goroutines.
type loader struct {
	client  *http.Client
	rate    int // shots a second, in batches every 10 ms
	maxConc int
	// next picks the next shot and where its answer goes; it is called from
	// the pacing goroutine only, so it may use rng freely.
	next func(rng *rand.Rand) (shot, *tally)

	sent, skipped atomic.Int64
}

// run paces shots until ctx ends, then waits for every answer.
func (l *loader) run(ctx context.Context, rng *rand.Rand) {
	sem := make(chan struct{}, l.maxConc)
	var wg sync.WaitGroup
	defer wg.Wait()
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Catch up on ticks the ticker dropped, so the rate holds.
		due := int64(time.Since(start).Seconds()*float64(l.rate)) - l.sent.Load() - l.skipped.Load()
		for range due {
			s, tl := l.next(rng)
			select {
			case sem <- struct{}{}:
			default:
				l.skipped.Add(1)
				continue
			}
			l.sent.Add(1)
			wg.Go(func() {
				defer func() { <-sem }()
				tl.record(fire(l.client, s, nil))
			})
		}
	}
}

// holder is a streamed request the upstream stalls (X-Fake-Stall-After) and
// the test holds open: it keeps one slot until released.
type holder struct {
	cancel context.CancelFunc
	done   chan answer
}

// hold opens a stalled stream on url with key and returns once its first
// event has arrived, i.e. it is admitted and streaming.
func hold(t *testing.T, client *http.Client, url, key string) *holder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &holder{cancel: cancel, done: make(chan answer, 1)}
	first := make(chan struct{})
	go func() {
		req := shot{url: url, body: streamBody, headers: map[string]string{
			"Authorization": "Bearer " + key, "X-Fake-Stall-After": "1"}}.request(ctx)
		res, err := client.Do(req)
		if err != nil {
			close(first)
			h.done <- answer{err: err, left: ctx.Err() != nil}
			return
		}
		defer func() { _ = res.Body.Close() }()
		a := answer{status: res.StatusCode, header: res.Header}
		br := bufio.NewReader(res.Body)
		line, err := br.ReadString('\n')
		close(first)
		if err == nil {
			_, err = io.Copy(io.Discard, br)
		}
		a.body, a.err = []byte(line), err
		a.left = ctx.Err() != nil
		h.done <- a
	}()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("a held stream was not admitted within 30 s")
	}
	return h
}

// release makes the holder's client go away and returns how its request
// ended.
func (h *holder) release() answer {
	h.cancel()
	return <-h.done
}
