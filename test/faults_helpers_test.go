//go:build faults

package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/redis/go-redis/v9"
)

// The fault suite's helpers: the fake provider as a process of its own, an
// upstream that resets every connection, a ledger of what the clients saw,
// and the checks every fault case ends with — the accounting identity
// against the proxy's own counters, nothing left in flight or queued, and
// the proxy's goroutines back at their idle count.

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

// streamBody asks for a streamed chat completion.
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// --- the fake provider as a process -----------------------------------------

var fakeBuild struct {
	once sync.Once
	path string
	err  error
}

// fakeproviderBin builds cmd/fakeprovider once, beside the meterproxy binary
// TestMain built (its directory is removed when the tests end).
func fakeproviderBin(t *testing.T) string {
	t.Helper()
	fakeBuild.once.Do(func() {
		root, err := procs.ModuleRoot()
		if err != nil {
			fakeBuild.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		fakeBuild.path, fakeBuild.err = procs.Build(ctx, root, filepath.Dir(meterproxyBin), "fakeprovider")
	})
	if fakeBuild.err != nil {
		t.Fatal(fakeBuild.err)
	}
	return fakeBuild.path
}

// fakeProc is a running cmd/fakeprovider.
type fakeProc struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	mu   sync.Mutex
	logs bytes.Buffer
}

var listeningLine = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startFake runs the fake provider on a free loopback port with args (its
// flags: -latency, -chunks, -chunk-interval, -rpm) and stops it with SIGTERM
// at cleanup, unless the test stopped it first.
func startFake(t *testing.T, args ...string) *fakeProc {
	t.Helper()
	cmd := exec.Command(fakeproviderBin(t), append([]string{"-listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &f.mu, w: &f.logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.mu.Lock()
			f.logs.Write(sc.Bytes())
			f.logs.WriteByte('\n')
			f.mu.Unlock()
			if m := listeningLine.FindSubmatch(sc.Bytes()); m != nil {
				addr <- string(m[1])
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		f.err = cmd.Wait()
		close(f.done)
	}()
	t.Cleanup(func() { f.stop(t) })
	select {
	case a := <-addr:
		f.URL = "http://" + a
	case <-f.done:
		t.Fatalf("fakeprovider exited before listening: %v\n%s", f.err, f.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("fakeprovider did not start\n%s", f.logText())
	}
	return f
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (f *fakeProc) logText() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs.String()
}

// stop ends the provider with SIGTERM (its graceful shutdown closes every
// idle connection, so the proxy's upstream pool empties) and waits for it.
func (f *fakeProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
		return
	default:
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
		t.Errorf("fakeprovider did not stop within 20 s")
	}
}

// --- an upstream that resets every connection -------------------------------

// resetter accepts connections, reads a request's headers and answers with
// a TCP reset (SO_LINGER 0), as a crashing upstream or a middlebox would.
type resetter struct {
	URL   string
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	count int
}

func startResetter(t *testing.T) *resetter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &resetter{URL: "http://" + ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns[c] = struct{}{}
			r.mu.Unlock()
			r.wg.Go(func() { r.reset(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		r.mu.Lock()
		for c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// resets returns how many connections the resetter has reset.
func (r *resetter) resets() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

func (r *resetter) reset(c net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.count++
		r.mu.Unlock()
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// --- what the clients saw ---------------------------------------------------

// proxyReasons maps each of meterproxy's own refusal codes to the status it
// must come with.
var proxyReasons = map[string]int{
	"unknown_caller":       http.StatusUnauthorized,
	"body_too_large":       http.StatusRequestEntityTooLarge,
	"bad_request":          http.StatusBadRequest,
	"queue_full":           http.StatusTooManyRequests,
	"max_wait_exceeded":    http.StatusTooManyRequests,
	"caller_cap_exceeded":  http.StatusTooManyRequests,
	"shutting_down":        http.StatusServiceUnavailable,
	"store_unavailable":    http.StatusServiceUnavailable,
	"upstream_unreachable": http.StatusBadGateway,
	"upstream_timeout":     http.StatusGatewayTimeout,
	// The front door's and the body reader's (see the hostile-clients case).
	"method_not_allowed":      http.StatusMethodNotAllowed,
	"upgrade_not_supported":   http.StatusBadRequest,
	"non_canonical_path":      http.StatusBadRequest,
	"conflicting_credentials": http.StatusBadRequest,
	"body_read_timeout":       http.StatusRequestTimeout,
	"body_memory_exhausted":   http.StatusServiceUnavailable,
	// Bodies the proxy and the provider could read differently.
	"duplicate_key":        http.StatusBadRequest,
	"unsupported_encoding": http.StatusUnsupportedMediaType,
	"charge_too_large":     http.StatusBadRequest,
}

// answer is how one request ended, as its client saw it.
type answer struct {
	status int
	header http.Header
	body   []byte
	// err is the transport error: before any answer when status is 0,
	// while reading the body otherwise.
	err error
	// left says the client itself went away (cancelled its request).
	left bool
	// hung says the request outlived hangLimit.
	hung bool
	// conn says which connection carried the request: new, or reused
	// after how long idle (for the failure message of a transport error).
	conn string
}

// tally is what the clients of one proxy saw.
type tally struct {
	mu          sync.Mutex
	sent        int
	forwarded   map[string]int // the upstream's answer, by status class
	refused     map[string]int // meterproxy's own answer, by error code
	cancelled   int            // the client left before any answer
	undelivered int            // the connection was refused: the proxy never saw it
	cutUpstream int            // forwarded, then broken off by the upstream
	cutClient   int            // forwarded, then the client left mid-body
	problems    []string       // anything the rules do not allow
}

func newTally() *tally {
	return &tally{forwarded: map[string]int{}, refused: map[string]int{}}
}

// record files one answer. A refusal must be JSON in the provider's error
// shape with the status its code calls for; a transport error the client
// did not cause is a problem, except a refused connection, which never
// reached the proxy.
func (tl *tally) record(a answer) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.sent++
	switch {
	case a.hung:
		tl.problem("no answer within %s", hangLimit)
	case a.status == 0 && a.left:
		tl.cancelled++
	case a.status == 0 && isConnRefused(a.err):
		tl.undelivered++
	case a.status == 0:
		tl.problem("no answer and the client did not leave (at %s, %s): %v", time.Now().Format("15:04:05.000"), a.conn, a.err)
	default:
		if code, ok := refusalCode(a.status, a.header, a.body); ok {
			tl.refused[code]++
			if want := proxyReasons[code]; want != a.status {
				tl.problem("refusal %s with status %d, want %d", code, a.status, want)
			}
			if a.err != nil {
				tl.problem("refusal %s broken off: %v", code, a.err)
			}
			return
		}
		tl.forwarded[codeClassOf(a.status)]++
		switch {
		case a.err != nil && a.left:
			tl.cutClient++
		case a.err != nil:
			tl.cutUpstream++
		}
	}
}

func (tl *tally) problem(format string, args ...any) {
	if len(tl.problems) < 20 {
		tl.problems = append(tl.problems, fmt.Sprintf(format, args...))
	} else if len(tl.problems) == 20 {
		tl.problems = append(tl.problems, "…")
	}
}

// add merges o into tl.
func (tl *tally) add(o *tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.sent += o.sent
	for k, v := range o.forwarded {
		tl.forwarded[k] += v
	}
	for k, v := range o.refused {
		tl.refused[k] += v
	}
	tl.cancelled += o.cancelled
	tl.undelivered += o.undelivered
	tl.cutUpstream += o.cutUpstream
	tl.cutClient += o.cutClient
	tl.problems = append(tl.problems, o.problems...)
}

func (tl *tally) totals() (fwd, ref int) {
	for _, n := range tl.forwarded {
		fwd += n
	}
	for _, n := range tl.refused {
		ref += n
	}
	return fwd, ref
}

func (tl *tally) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fwd, ref := tl.totals()
	return fmt.Sprintf("sent %d: forwarded %d %v (cut by upstream %d, by client %d), refused %d %v, cancelled %d, never delivered %d",
		tl.sent, fwd, sortedCounts(tl.forwarded), tl.cutUpstream, tl.cutClient, ref, sortedCounts(tl.refused), tl.cancelled, tl.undelivered)
}

func sortedCounts(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// refusalCode reports whether an answer is meterproxy's own: a JSON body in
// OpenAI's error shape whose code is one of meterproxy's refusal codes. The
// fake provider's errors use OpenAI's own codes (rate_limit_exceeded, …),
// never these.
func refusalCode(status int, h http.Header, body []byte) (string, bool) {
	if status < 400 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		return "", false
	}
	var e struct {
		Error struct {
			Code *string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == nil {
		return "", false
	}
	if _, ok := proxyReasons[*e.Error.Code]; !ok {
		return "", false
	}
	return *e.Error.Code, true
}

func codeClassOf(status int) string { return fmt.Sprintf("%dxx", status/100) }

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

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
		return answer{err: err, left: ctx.Err() != nil, hung: errors.Is(context.Cause(ctx), errHung), conn: conn}
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

// --- the proxy's side -------------------------------------------------------

// reading is what the checks read from one scrape of a proxy.
type reading struct {
	forwarded  map[string]float64 // by code class
	refused    float64
	cancelled  float64
	reasons    map[string]float64 // meterproxy_refusals_total by reason
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
	r := reading{forwarded: map[string]float64{}, reasons: map[string]float64{}}
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

// arrived is how many requests of class the proxy has received since
// before: queued, in flight or ended. A request is counted ended just
// before its slot is released, so the sum may run one ahead for a moment,
// never behind.
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
	_, ref := tl.totals()
	if n := got.refused - base.refused; int(n) != ref {
		diffs = append(diffs, fmt.Sprintf("refused: proxy %v, clients %d", n, ref))
	}
	for reason := range proxyReasons {
		if n := got.reasons[reason] - base.reasons[reason]; int(n) != tl.refused[reason] {
			diffs = append(diffs, fmt.Sprintf("refused %s: proxy %v, clients %d", reason, n, tl.refused[reason]))
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
	fwd, ref := tl.totals()
	sum := fwd + ref + tl.cancelled + tl.undelivered
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

// seeded returns a PCG generator with a fixed seed, logged: each case draws
// the same kinds, orders and moments on every run.
func seeded(t *testing.T, seed uint64) *rand.Rand {
	t.Logf("random seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // G404: seeded on purpose, so a run can be replayed
}

// --- many clients, many kinds of request ------------------------------------

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

// ledger keeps one tally per proxy and kind of request, so the identity can
// be checked per proxy and each kind's own rule per kind.
type ledger struct {
	mu sync.Mutex
	m  map[[2]string]*tally
}

func newLedger() *ledger { return &ledger{m: map[[2]string]*tally{}} }

// of returns the tally of kind on proxy.
func (l *ledger) of(proxy, kind string) *tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]string{proxy, kind}
	if l.m[k] == nil {
		l.m[k] = newTally()
	}
	return l.m[k]
}

// merged adds up every tally for which keep(proxy, kind) holds.
func (l *ledger) merged(keep func(proxy, kind string) bool) *tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := newTally()
	for k, tl := range l.m {
		if keep(k[0], k[1]) {
			out.add(tl)
		}
	}
	return out
}

func (l *ledger) proxy(name string) *tally {
	return l.merged(func(p, _ string) bool { return p == name })
}

func (l *ledger) kind(kind string) *tally {
	return l.merged(func(_, k string) bool { return k == kind })
}

func (l *ledger) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for k := range l.m {
		seen[k[1]] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// kindRule is what one kind of request may end as. Refusals for lack of
// capacity (429 max_wait_exceeded, queue_full) are always allowed: under
// faults a request may wait too long.
type kindRule struct {
	forwarded []string // status classes the upstream may answer
	refused   []string // meterproxy's codes besides the capacity ones
	// cut: every forwarded answer is broken off by the upstream.
	cut bool
	// must is the outcome at least one request of the kind must have
	// ("2xx", "5xx", or a refusal code), so the kind was exercised.
	must string
}

// checkRules checks every kind in the ledger against rules; a kind without
// a rule is an error.
func checkRules(t *testing.T, l *ledger, rules map[string]kindRule) {
	t.Helper()
	for _, kind := range l.kinds() {
		tl := l.kind(kind)
		r, ok := rules[kind]
		if !ok {
			t.Errorf("kind %s has no rule", kind)
			continue
		}
		var bad []string
		for cc, n := range tl.forwarded {
			if n > 0 && !slices.Contains(r.forwarded, cc) {
				bad = append(bad, fmt.Sprintf("%d forwarded %s", n, cc))
			}
		}
		for code, n := range tl.refused {
			if n > 0 && code != "max_wait_exceeded" && code != "queue_full" && !slices.Contains(r.refused, code) {
				bad = append(bad, fmt.Sprintf("%d refused %s", n, code))
			}
		}
		if tl.cancelled > 0 {
			bad = append(bad, fmt.Sprintf("%d cancelled", tl.cancelled))
		}
		if tl.undelivered > 0 {
			bad = append(bad, fmt.Sprintf("%d never delivered", tl.undelivered))
		}
		if r.cut && tl.cutUpstream != tl.forwarded["2xx"] {
			bad = append(bad, fmt.Sprintf("%d of %d forwarded cut by the upstream, want all", tl.cutUpstream, tl.forwarded["2xx"]))
		}
		if !r.cut && tl.cutUpstream > 0 {
			bad = append(bad, fmt.Sprintf("%d cut by the upstream", tl.cutUpstream))
		}
		if tl.forwarded[r.must] == 0 && tl.refused[r.must] == 0 {
			bad = append(bad, "none ended as "+r.must)
		}
		if len(tl.problems) > 0 {
			bad = append(bad, fmt.Sprintf("problems %v", tl.problems))
		}
		if len(bad) > 0 {
			t.Errorf("%s (%s): %s", kind, tl, strings.Join(bad, "; "))
		} else {
			t.Logf("%s: %s", kind, tl)
		}
	}
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

// --- proxies in a fleet -----------------------------------------------------

// fleetRedis is a Redis the test owns, the fleet's key prefix on it, and
// one client to look at the fleet's keys with.
type fleetRedis struct {
	*redistest.Server
	prefix string
	c      *redis.Client
}

// ownedRedis starts a redis-server the test may kill, pause and restart.
// The fault suite needs one of its own: with REDIS_URL set it fails rather
// than skip, since a skipped fault case proves nothing.
func ownedRedis(t *testing.T) *fleetRedis {
	t.Helper()
	srv := redistest.Start(t)
	if !srv.Owned() {
		t.Fatal("the fault suite kills, pauses and restarts Redis: unset REDIS_URL so that it starts redis-server of its own")
	}
	return &fleetRedis{Server: srv, prefix: redistest.Prefix(t), c: srv.Client(t)}
}

// config is a replica's config in the fleet on r, forwarding to upstream,
// logging at debug level: net/http logs handler panics there, and every
// case fails on one.
func (r *fleetRedis) config(upstream string) config {
	c := fleetConfig(upstream, r.Server, r.prefix)
	c.set("log.level", "debug")
	return c
}

// replicaIDs returns the replicas Redis currently counts as alive.
func (r *fleetRedis) replicaIDs(t *testing.T) map[string]bool {
	t.Helper()
	ids, err := r.c.ZRange(t.Context(), "{"+r.prefix+"}:heartbeat", 0, -1).Result()
	if err != nil {
		t.Fatalf("read the replicas' heartbeats: %v", err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// newReplicaID waits until a replica that is not in before shows up in
// Redis's heartbeats and returns its id.
func (r *fleetRedis) newReplicaID(t *testing.T, before map[string]bool) string {
	t.Helper()
	var id string
	waitFor(t, "the new replica's first heartbeat in Redis", func() bool {
		for x := range r.replicaIDs(t) {
			if !before[x] {
				id = x
				return true
			}
		}
		return false
	})
	return id
}

// inFlight returns the fleet's in-flight hash as Redis holds it: totals i
// and b, and each replica's own counts.
func (r *fleetRedis) inFlight(t *testing.T) map[string]string {
	t.Helper()
	m, err := r.c.HGetAll(t.Context(), "{"+r.prefix+"}:inflight").Result()
	if err != nil {
		t.Fatalf("read the fleet's in-flight hash: %v", err)
	}
	return m
}

// waitEmpty waits until Redis counts nothing in flight for the fleet, in
// the account and in every pool of pools (account.models names).
func (r *fleetRedis) waitEmpty(t *testing.T, pools ...string) {
	t.Helper()
	keys := []string{"{" + r.prefix + "}:inflight"}
	for _, p := range pools {
		keys = append(keys, "{"+r.prefix+":pool:"+p+"}:inflight")
	}
	waitFor(t, "Redis's in-flight totals to return to 0", func() bool {
		for _, k := range keys {
			m, err := r.c.HGetAll(t.Context(), k).Result()
			if err != nil {
				t.Fatalf("read %s: %v", k, err)
			}
			if (m["i"] != "" && m["i"] != "0") || (m["b"] != "" && m["b"] != "0") {
				return false
			}
		}
		return true
	})
}

// --- streams held open ------------------------------------------------------

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

// --- shutdown order ---------------------------------------------------------

// shutdownOrder watches a proxy being stopped: every 2 ms it tries a new
// connection to the proxy listener, then asks /readyz. It returns once the
// listener refuses, reporting whether /readyz had answered 503 by then (in
// that round or an earlier one).
func shutdownOrder(proxyURL, adminURL string) (readyFirst bool, err error) {
	addr := strings.TrimPrefix(proxyURL, "http://")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	notReady := false
	for time.Now().Before(deadline) {
		c, derr := net.DialTimeout("tcp", addr, time.Second)
		if derr == nil {
			_ = c.Close()
		}
		if res, err := client.Get(adminURL + "/readyz"); err == nil {
			_ = res.Body.Close()
			notReady = notReady || res.StatusCode == http.StatusServiceUnavailable
		}
		if derr != nil {
			// Refused, or reset when the listener closed with the
			// connection still in its backlog.
			if !isConnRefused(derr) && !errors.Is(derr, syscall.ECONNRESET) {
				return false, derr
			}
			return notReady, nil
		}
		<-tick.C
	}
	return false, errors.New("the listener still accepted connections after 30 s")
}
