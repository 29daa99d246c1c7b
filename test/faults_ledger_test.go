//go:build faults

package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fault suite's ledger: how each request ended as its client saw it,
// tallied per proxy and kind of request, and each kind's rule.

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
	"non_canonical_path":      http.StatusBadRequest,
	"conflicting_credentials": http.StatusBadRequest,
	"body_read_timeout":       http.StatusRequestTimeout,
	"body_memory_exhausted":   http.StatusServiceUnavailable,
	// Bodies the proxy and the provider could read differently.
	"duplicate_key":        http.StatusBadRequest,
	"unsupported_encoding": http.StatusUnsupportedMediaType,
	"charge_too_large":     http.StatusBadRequest,
	// Unknown callers' streams past their connection's bound.
	"too_many_streams": http.StatusTooManyRequests,
}

// negotiationReasons maps each of meterproxy's front-door negotiations
// (meterproxy_negotiations_total: no request, no refusal) to the status
// it must come with.
var negotiationReasons = map[string]int{
	"upgrade_required": http.StatusUpgradeRequired,
	"not_an_api":       http.StatusNotFound,
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
	// refusedUnread is the shot's refusal when the client's write failed
	// with its answer unread (shot.refusedUnread).
	refusedUnread string
}

// tally is what the clients of one proxy saw.
type tally struct {
	mu          sync.Mutex
	sent        int
	forwarded   map[string]int // the upstream's answer, by status class
	refused     map[string]int // meterproxy's own answer, by error code
	negotiated  map[string]int // meterproxy's negotiation, by error code
	cancelled   int            // the client left before any answer
	undelivered int            // the connection was refused: the proxy never saw it
	cutUpstream int            // forwarded, then broken off by the upstream
	cutClient   int            // forwarded, then the client left mid-body
	problems    []string       // anything the rules do not allow
}

func newTally() *tally {
	return &tally{forwarded: map[string]int{}, refused: map[string]int{}, negotiated: map[string]int{}}
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
	case a.status == 0 && a.refusedUnread != "":
		tl.refused[a.refusedUnread]++
	case a.status == 0:
		tl.problem("no answer and the client did not leave (at %s, %s): %v", time.Now().Format("15:04:05.000"), a.conn, a.err)
	default:
		if code, ok := negotiationCode(a.status, a.header, a.body); ok {
			tl.negotiated[code]++
			if want := negotiationReasons[code]; want != a.status {
				tl.problem("negotiation %s with status %d, want %d", code, a.status, want)
			}
			return
		}
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
	for k, v := range o.negotiated {
		tl.negotiated[k] += v
	}
	tl.cancelled += o.cancelled
	tl.undelivered += o.undelivered
	tl.cutUpstream += o.cutUpstream
	tl.cutClient += o.cutClient
	tl.problems = append(tl.problems, o.problems...)
}

func (tl *tally) totals() (fwd, ref, neg int) {
	for _, n := range tl.forwarded {
		fwd += n
	}
	for _, n := range tl.refused {
		ref += n
	}
	for _, n := range tl.negotiated {
		neg += n
	}
	return fwd, ref, neg
}

func (tl *tally) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fwd, ref, neg := tl.totals()
	return fmt.Sprintf("sent %d: forwarded %d %v (cut by upstream %d, by client %d), refused %d %v, negotiated %d %v, cancelled %d, never delivered %d",
		tl.sent, fwd, sortedCounts(tl.forwarded), tl.cutUpstream, tl.cutClient, ref, sortedCounts(tl.refused), neg, sortedCounts(tl.negotiated),
		tl.cancelled, tl.undelivered)
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
	return errorCodeIn(proxyReasons, status, h, body)
}

// negotiationCode is refusalCode for meterproxy's negotiations.
func negotiationCode(status int, h http.Header, body []byte) (string, bool) {
	return errorCodeIn(negotiationReasons, status, h, body)
}

// errorCodeIn reports whether an answer is a JSON body in OpenAI's error
// shape whose code is one of codes'.
func errorCodeIn(codes map[string]int, status int, h http.Header, body []byte) (string, bool) {
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
	if _, ok := codes[*e.Error.Code]; !ok {
		return "", false
	}
	return *e.Error.Code, true
}

func codeClassOf(status int) string { return fmt.Sprintf("%dxx", status/100) }

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

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
	forwarded  []string // status classes the upstream may answer
	refused    []string // meterproxy's codes besides the capacity ones
	negotiated []string // meterproxy's negotiations
	// cut: every forwarded answer is broken off by the upstream.
	cut bool
	// must is the outcome at least one request of the kind must have
	// ("2xx", "5xx", a refusal or a negotiation code), so the kind was
	// exercised.
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
		for code, n := range tl.negotiated {
			if n > 0 && !slices.Contains(r.negotiated, code) {
				bad = append(bad, fmt.Sprintf("%d negotiated %s", n, code))
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
		if tl.forwarded[r.must] == 0 && tl.refused[r.must] == 0 && tl.negotiated[r.must] == 0 {
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
