package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota/price"
)

// AccessSchema is the version of the access log's schema (docs/records.md,
// "The access log"): a line's "schema" field. It changes only when a field
// changes meaning or goes away; a field added keeps it.
const AccessSchema = 1

// The kinds of access log line: an HTTP request, a WebSocket session (its
// handshake, and its close when it opened), a request made on a
// WebSocket (a turn).
const (
	kindRequest = "request"
	kindSession = "session"
	kindTurn    = "turn"
)

// outcomeNegotiated is the access log's outcome of a front-door
// negotiation (426 upgrade_required, 404 not_an_api), which
// meterproxy_requests_total does not count (records.count).
const outcomeNegotiated = "negotiated"

// Who cut an answer short (accessState.cut).
const (
	cutByClient     = "client"
	cutByUpstream   = "upstream"
	cutByMeterproxy = "meterproxy"
)

// accessState is what an exchange gathers for its access log line as it
// goes: set on the request's goroutine, or on the read-ahead's, which
// ends before the handler does (readAhead.Close waits for it).
type accessState struct {
	// start is when the request arrived; requestID its id (requestIDOf),
	// providerID the upstream's id for its answer (providerRequestID).
	start      time.Time
	requestID  string
	providerID string
	// session is a turn's socket's request id.
	session string
	// waited is how long it waited for admission; firstByte when the
	// upstream's answer began (0: no answer).
	waited    time.Duration
	firstByte time.Time
	// stream says the request asked for an event stream.
	stream bool
	// bytesIn are the request body's bytes read from the client;
	// bytesOut (a socket turn's) the events' bytes sent to it.
	bytesIn, bytesOut int64
	// cut says who cut the answer short: cutBy…, "" when nobody did.
	cut string
	// tally is what settle and spend counted for it.
	tally accessTally
}

// accessRecord is one access log line, a value handed to the writer
// (AccessLog): nothing in it is shared with the request once it is sent.
type accessRecord struct {
	time                                 time.Time
	kind, requestID, session, providerID string
	route                                accessRoute
	answer                               accessAnswer
	timing                               accessTiming
	// tally is the request's tokens and cost, as settle and spend
	// counted them.
	tally   accessTally
	traffic accessTraffic
}

// accessTally is what settle and spend counted for a request: metered
// says settle counted used (its tokens; zero until it did), spent that
// spend counted cost (priced: a price matched).
type accessTally struct {
	metered, spent, priced bool
	used                   usage.Usage
	cost                   price.Nanodollars
}

// accessRoute is where a line's request went: who sent it, the account
// and pool that took it, the model and API it asked for, and its method
// and path (at most maxAccessPath bytes).
type accessRoute struct {
	caller, class, account, pool string
	model, api, method, path     string
}

// accessAnswer is how a line's request was answered: its status (0:
// none), outcome, the reason it was refused or negotiated, who cut it
// short, and whether it asked for an event stream.
type accessAnswer struct {
	status               int
	outcome, reason, cut string
	stream               bool
}

// accessTiming is how long a line's request waited for admission, until
// the upstream's first byte (ttfb) and in all.
type accessTiming struct {
	wait, ttfb, duration time.Duration
}

// accessTraffic is what a line's request moved: its spills and flex
// retries, and its bytes in from and out to the client.
type accessTraffic struct {
	spills, flexRetries int
	bytesIn, bytesOut   int64
}

// maxAccessPath bounds the path a line names.
const maxAccessPath = 256

// recordOf is the line for ex, which ended as outcome with status (0:
// none), refused or negotiated for reason, at end. Tokens and cost are
// exactly what settle and spend counted for it (meterproxy_tokens_total,
// meterproxy_spend_usd_total): nothing else sets them.
func recordOf(ex *exchange, kind, outcome string, status int, reason string, end time.Time) accessRecord {
	a := &ex.access
	l := ex.poolLabels()
	rec := accessRecord{
		time: a.start, kind: kind, requestID: a.requestID, session: a.session, providerID: a.providerID,
		route: accessRoute{caller: ex.res.Caller, class: ex.res.Class.String(), account: l.Account, pool: l.Pool,
			model: ex.ask.model.Name, api: ex.rt.api.String()},
		answer:  accessAnswer{outcome: outcome, reason: reason, cut: a.cut, status: status, stream: a.stream},
		timing:  accessTiming{wait: a.waited, duration: end.Sub(a.start)},
		tally:   a.tally,
		traffic: accessTraffic{spills: ex.trace.tried.spills, flexRetries: ex.trace.tried.flexRetries, bytesIn: a.bytesIn, bytesOut: a.bytesOut},
	}
	if ex.dest.in != nil {
		rec.route.method, rec.route.path = ex.dest.in.Method, ex.dest.in.URL.Path
	}
	if len(rec.route.path) > maxAccessPath {
		rec.route.path = rec.route.path[:maxAccessPath]
	}
	if !a.firstByte.IsZero() && !ex.upstream.start.IsZero() {
		rec.timing.ttfb = a.firstByte.Sub(ex.upstream.start)
	}
	if ex.upload.body != nil {
		rec.traffic.bytesIn = ex.upload.body.read.Load()
	}
	if ex.rec != nil && kind == kindRequest {
		rec.traffic.bytesOut = ex.rec.written
	}
	return rec
}

// settled records u, which settle counted for ex.
func (a *accessTally) settled(u usage.Usage) {
	if a.metered { // never twice in practice; summed if so, as the counters are (the model: the last named)
		u.Input, u.Output = usage.AddTokens(u.Input, a.used.Input), usage.AddTokens(u.Output, a.used.Output)
		u.CacheRead, u.CacheWrite = a.used.CacheRead+u.CacheRead, a.used.CacheWrite+u.CacheWrite
		u.Reasoning = min(a.used.Reasoning+u.Reasoning, u.Output)
		u.AudioInput, u.AudioOutput = a.used.AudioInput+u.AudioInput, a.used.AudioOutput+u.AudioOutput
		u.Estimated = u.Estimated || a.used.Estimated
		if u.Model == "" {
			u.Model = a.used.Model
		}
	}
	a.metered, a.used = true, u
}

// charged records cost, which spend counted for ex (priced: a price
// matched).
func (a *accessTally) charged(cost price.Nanodollars, priced bool) {
	if a.spent {
		priced = priced && a.priced
	}
	a.spent, a.cost, a.priced = true, a.cost+cost, priced
}

// answered records that the upstream's answer began now, and the
// provider's id for it from hdr.
func (a *accessState) answered(hdr http.Header, now time.Time) {
	if a.firstByte.IsZero() {
		a.firstByte = now
	}
	if id := providerRequestID(hdr); id != "" {
		a.providerID = id
	}
}

// maxRequestID bounds a request id's length, the caller's or the
// provider's.
const maxRequestID = 128

// saneID reports whether s may stand as a request id in a log line and
// a header: 1 to maxRequestID bytes of letters, digits and - _ . : / + = @.
func saneID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '=' || c == '@':
		default:
			return false
		}
	}
	return true
}

// requestIDHeader carries a request's id: the caller's, echoed in the
// answer and sent upstream.
const requestIDHeader = "X-Request-Id"

// providerIDHeader is where the client finds OpenAI's own id for its
// answer, which the answer's X-Request-Id no longer carries (the
// request's own does, begin): the id a provider's support asks for.
const providerIDHeader = "X-Provider-Request-Id"

// providerID moves the provider's X-Request-Id of an answer's headers
// hdr to providerIDHeader, so that the answer carries the request's own
// id in X-Request-Id (begin) and the client still has the provider's;
// one that is not sane (saneID) is dropped.
func providerID(hdr http.Header) {
	v, ok := hdr[requestIDHeader]
	if !ok {
		return
	}
	delete(hdr, requestIDHeader)
	if len(v) > 0 && saneID(v[0]) {
		hdr[providerIDHeader] = v[:1]
	}
}

// providerIDHeaders are where providers put their id for an answer:
// OpenAI's, Anthropic's and Azure's.
var providerIDHeaders = [...]string{"X-Request-Id", "Request-Id", "Apim-Request-Id"}

// providerRequestID is the provider's id for its answer, from hdr: the
// first sane one of providerIDHeaders; "" when none is.
func providerRequestID(hdr http.Header) string {
	for _, name := range providerIDHeaders {
		if v := hdr[name]; len(v) > 0 && saneID(v[0]) {
			return v[0]
		}
	}
	return ""
}

// requestIDs makes the ids of requests that bring none (or none sane):
// the process's random prefix, then a count.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

// next is a new request id, unique to the process (and, by its random
// prefix, in all likelihood to the fleet). Safe for concurrent use.
func (g *requestIDs) next() string {
	var b [64]byte
	out := append(b[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}

// requestIDOf is the id of the request with header hdr: the caller's
// X-Request-Id when it is sane (saneID), else a new one.
func (g *requestIDs) of(hdr http.Header) string {
	if v := hdr[requestIDHeader]; len(v) == 1 && saneID(v[0]) {
		return v[0]
	}
	return g.next()
}

// newIDPrefix is a process's request id prefix: 8 random bytes in hex
// and a dash.
func newIDPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:]) + "-"
}
