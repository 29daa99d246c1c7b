package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
)

// The socket layer: an API spoken over a WebSocket (the Responses API's
// WebSocket mode) is opened at a handshake classified and authenticated
// as an HTTP request is (sockets.serve), relayed message by message both
// ways (socketrelay.go, bounded by socketmsg.go), and metered by its
// API's socketMeter, whose hooks see every message and make turns of the
// requests among them (socketturn.go): each admitted, charged and
// settled by the same code an HTTP request is.

// socketAPI is an API spoken over WebSockets: how its sockets are metered.
type socketAPI interface {
	// name labels the API in the socket metrics: a closed set.
	name() string
	// meter returns the meter of one socket of the API, once it is open.
	meter(s *socket) socketMeter
	// open is asked at the handshake ex, once its caller may open a
	// socket and before the upstream's is dialled: a refusal to answer
	// it with, or leave, which the handshake calls once the socket has
	// ended (or never opened).
	open(sk *sockets, r *http.Request, ex *exchange) (leave func(), f *refusal)
	// errorEvent is f as the error event that answers a client's request
	// named ref (a Responses lane, a Realtime client event's id; "" for
	// none).
	errorEvent(f refusal, ref string) []byte
}

// socketMeter meters one socket: the relay calls its hooks, and it makes
// turns of the requests it finds (socket.startTurn, socketTurn).
type socketMeter interface {
	// client is called with each data message of the client, in order,
	// from the socket's one dispatch goroutine; it reports whether the
	// message goes upstream. It may block — a turn waits here for its
	// admission, and the client's later messages behind it — until ctx
	// ends, when the socket does, and may answer the client itself
	// (socket.tell). It must not keep m past the call.
	client(ctx context.Context, m *socketMessage) bool
	// upstream is called with each data message of the upstream, in
	// order, from the upstream reader, before the message goes to the
	// client (a turn's terminal event is settled before the client has
	// it). It must not keep m past the call.
	upstream(m *socketMessage)
	// closed is called once, when the socket has ended and neither hook
	// runs any more: every turn still in flight was cut by side
	// (socketSide…), and is settled as cut.
	closed(side string)
}

// socketAPIFor is the API a WebSocket handshake on rt opens, or nil when
// the proxy meters none there: the Responses API's paths (OpenAI's, and
// Azure's v1 and preview ones), and the Realtime API's.
func socketAPIFor(rt route) socketAPI {
	switch {
	case rt.api == usage.Responses && rt.deployment == "":
		return responsesSocket{}
	case rt.api == usage.Realtime:
		return realtimeSocket{}
	}
	return nil
}

// socketOf is the API a WebSocket handshake r opens — a GET asking to
// upgrade to websocket, on a canonical path socketAPIFor knows — or nil:
// every other upgrade is refused at the front door (inspect).
func socketOf(r *http.Request) socketAPI {
	if r.Method != http.MethodGet || !hasToken(r.Header, "Upgrade", "websocket") || !hasToken(r.Header, "Connection", "upgrade") {
		return nil
	}
	rt, err := routeOf(r.URL)
	if err != nil {
		return nil
	}
	return socketAPIFor(rt)
}

// hasToken reports whether a comma-separated header names token (case
// folded).
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// inspectSocket checks a WebSocket handshake by every rule of the front
// door but the refusal of upgrades (inspect): its method, credentials
// and path.
func inspectSocket(r *http.Request) (route, *refusal) {
	plain := *r
	plain.Header = r.Header.Clone()
	plain.Header.Del("Upgrade")
	plain.Header.Del("Connection")
	return inspect(&plain)
}

// serve answers a WebSocket handshake r for api: refused as an HTTP
// request would be (the front door, an unknown caller, too many sockets
// of its caller) before anything is dialled; else the upstream socket is
// opened at the caller's class's home account with the caller's request
// headers (its key replaced as for HTTP), and only then is the client's
// accepted: a failed dial answers as a failed HTTP request does (502,
// 504, or the upstream's own refusal passed on). An open socket is relayed
// until either side ends it (run); its handshake is not a request
// of meterproxy_requests_total — its turns are.
func (sk *sockets) serve(w http.ResponseWriter, r *http.Request, api socketAPI, live *Live, res classify.Result, classifyErr error) {
	rt, bad := inspectSocket(r)
	// No write deadline on the handshake's answer: one set before the
	// connection is hijacked would stay on it.
	ex := sk.accounts.newExchange(live, res, rt, w, 0)
	ex.ask.socket = true
	sk.records.begin(ex, w, r, time.Now())
	ex.trace.span = sk.tr.requestSpan(r.Context(), ex)
	opened := false
	defer func() {
		if !opened {
			sk.records.count(ex)
		}
	}()
	leave, ok := sk.door.screen(w, r, ex, bad, classifyErr)
	defer leave()
	if !ok {
		return
	}
	if f := sk.accounts.unserved(ex, r.Method, r.URL.Path); f != nil {
		ex.refuse(*f)
		return
	}
	exit, ok := sk.set.enter(res.Caller, sk.bounds.perCaller)
	if !ok {
		ex.refuse(tooManySockets(sk.bounds.perCaller))
		return
	}
	defer exit()
	ex.at(sk.admitter.HomeAccount(res.Class, ex.among), "")
	leaveAPI, f := api.open(sk, r, ex)
	if f != nil {
		ex.refuse(*f)
		return
	}
	defer leaveAPI()
	up, err := sk.dial(r, ex)
	if err != nil {
		return // answered
	}
	cc, err := websocket.Accept(ex.rec, r, &websocket.AcceptOptions{
		CompressionMode: websocket.CompressionNoContextTakeover, CompressionThreshold: neverCompress,
	})
	if err != nil {
		ex.rec.refuse(reasonBadRequest) // Accept answered why (a malformed handshake, a foreign Origin)
		_ = up.CloseNow()
		return
	}
	opened = true
	sk.run(context.WithoutCancel(r.Context()), api, ex, cc, up)
}

// neverCompress is the compression threshold of both sides of a socket:
// permessage-deflate is negotiated, so peers may send compressed
// messages (read within server.max_socket_message_bytes after
// decompression), but the proxy writes none compressed — a compressor is
// a megabyte per message written, which no budget counts.
const neverCompress = 1 << 62

// socketHeaders are the handshake headers the dial sets itself, or that
// describe the client's hop alone: never forwarded.
var socketHeaders = []string{
	"Connection", "Upgrade", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding",
	"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol", "Sec-Websocket-Accept",
}

// dial opens the upstream socket for handshake r at ex's account,
// through the shared transport (its pool for sockets): r's headers
// forwarded as an HTTP request's are (the class header and hop-by-hop
// ones dropped, the account's key in place of the caller's), r's path and
// query joined to the account's URL. On failure it has answered r: the
// upstream's own answer to the handshake passed on, or 502/504.
func (sk *sockets) dial(r *http.Request, ex *exchange) (*websocket.Conn, error) {
	acct := sk.accounts.get(ex.dest.account)
	out := &http.Request{URL: &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}, Header: r.Header.Clone()}
	(&httputil.ProxyRequest{In: r, Out: out}).SetURL(acct.target)
	hdr := out.Header
	for _, name := range socketHeaders {
		hdr.Del(name)
	}
	hdr.Del(ex.live.ClassHeader)
	hdr[requestIDHeader] = []string{ex.access.requestID}
	if acct.key != "" {
		replaceCredential(hdr, ex.credential(), acct.key)
	}
	up, resp, err := websocket.Dial(r.Context(), out.URL.String(), &websocket.DialOptions{
		HTTPClient: sk.client, HTTPHeader: hdr,
		CompressionMode: websocket.CompressionNoContextTakeover, CompressionThreshold: neverCompress,
	})
	if resp != nil && resp.Body != nil {
		defer func() { _ = resp.Body.Close() }() // the start of a refusal's body, which the dial kept
	}
	if err == nil {
		return up, nil
	}
	switch {
	case resp != nil && resp.StatusCode != http.StatusSwitchingProtocols:
		sk.passRefusal(ex, resp)
	case r.Context().Err() != nil: // the client left: nothing is written, it counts as cancelled
	default:
		f := transportRefusal(err)
		sk.log.Warn("upstream_failed", slog.String("reason", f.reason), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		ex.refuse(f)
	}
	return nil, err
}

// passRefusal passes on the upstream's answer to a handshake it did not
// accept (a 401, a 429, a 404 for a path it has no socket on), as the
// HTTP path passes on any answer: its status, its headers but hop-by-hop
// ones, the start of its body the dial kept. Its rate-limit headers are
// read as any answer's are (observe).
func (sk *sockets) passRefusal(ex *exchange, resp *http.Response) {
	sk.metering.observe(resp, time.Now(), ex)
	ex.access.answered(resp.Header, time.Now())
	dst := ex.rec.Header()
	for k, vs := range resp.Header {
		if k != requestIDHeader { // the answer carries the request's own (begin)
			dst[k] = vs
		}
	}
	for _, name := range socketHeaders {
		dst.Del(name)
	}
	dst.Del("Content-Length")
	ex.rec.WriteHeader(resp.StatusCode)
	if resp.Body != nil {
		_, _ = io.Copy(ex.rec, resp.Body) // at most the 1 KiB the dial kept
	}
}

// run relays an open socket until it ends, then settles what was
// in flight (socketMeter.closed).
func (sk *sockets) run(ctx context.Context, api socketAPI, ex *exchange, client, upstream *websocket.Conn) {
	s := &socket{sk: sk, api: api, ex: ex, client: client, upstream: upstream,
		socketWatch: socketWatch{quiet: make(chan struct{}, 1), drain: make(chan struct{})}, queue: make(chan *socketMessage, socketQueue)}
	s.work, s.stopWork = context.WithCancel(ctx)
	s.io, s.stopIO = context.WithCancel(ctx)
	defer s.stopWork()
	defer s.stopIO()
	limit := sk.bounds.maxMessage
	client.SetReadLimit(limit)
	upstream.SetReadLimit(limit)
	s.touch()
	s.meter = api.meter(s)
	if !sk.set.add(s) {
		s.finish(socketSideProxy, websocket.StatusGoingAway, closeShuttingDown)
	}
	defer sk.set.remove(s)
	class := ex.res.Class.String()
	open := sk.m.sockets.open.WithLabelValues(api.name(), class)
	open.Inc()
	defer open.Dec()
	var wg sync.WaitGroup
	wg.Go(s.readClient)
	wg.Go(s.dispatch)
	wg.Go(s.readUpstream)
	wg.Go(s.watch)
	wg.Wait()
	s.meter.closed(s.side)
	sk.records.logSession(ex, s.side) // after its turns in flight settled and logged (closed)
	sk.m.sockets.closed.WithLabelValues(api.name(), s.side).Inc()
}
