package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// socketTurn is one request made on a socket (a Responses
// response.create): an exchange of its own, admitted, charged and settled
// by the code an HTTP request is — admitExchange, answered, settle,
// endUpstream, countAs — and counted once when it ends. Its events are
// read by a usage.Meter as its HTTP stream's would be. A socketMeter
// uses it from its two hooks, never both at once (it holds its own
// lock), and from closed.
type socketTurn struct {
	s     *socket
	ex    *exchange
	meter *usage.Meter
	// begun says an event of it came from the upstream (its answer
	// began); ended that it was settled and counted.
	begun, ended bool
	// shadowEnd ends its shadow decision (mode shadow); nil otherwise.
	shadowEnd func()
}

// startTurn makes a turn of b, a request body of the socket's API read
// as an HTTP request's (prepare: its model, input estimate, output cap,
// hidden input), and waits for its admission in the caller's class at
// the socket's account, as an HTTP request is held. It returns the turn,
// counted in flight until it ends; or nil when it was refused — the
// client told so with an error event naming lane (tellRefusal) — or when
// ctx ended first (cancelled). Once the proxy drains, every turn is
// refused shutting_down.
func (s *socket) startTurn(ctx context.Context, b *body, lane string) *socketTurn {
	return s.startTurnWith(ctx, lane, func(ex *exchange) *refusal {
		_, bad := s.sk.metering.prepare(http.Header{}, ex, b)
		return bad
	})
}

// startTurnWith is startTurn with the turn's exchange read by prepare
// (its model, input estimate, output cap and charge), which may refuse
// it; lane names the request in the error event that refuses it (a
// Responses lane, a Realtime client event's id).
func (s *socket) startTurnWith(ctx context.Context, lane string, prepare func(ex *exchange) *refusal) *socketTurn {
	sk, start := s.sk, time.Now()
	ex := s.requestExchange()
	sk.tr.startTurn(s.ex, ex, start)
	if s.draining() {
		f, _ := reasonOf(gate.ErrClosed, ex.res.Class, apiName{})
		s.refuseTurn(ex, f, lane)
		return nil
	}
	if bad := prepare(ex); bad != nil {
		s.refuseTurn(ex, *bad, lane)
		return nil
	}
	account := s.ex.dest.account
	ex.at(account, sk.admitter.PoolAt(account, func() quota.Model { return ex.ask.model }))
	t := &socketTurn{s: s, ex: ex}
	if ex.live.Shadow {
		t.shadowEnd = sk.metering.shadows.decide(ctx, ex)
	} else {
		lease, f := sk.metering.admitExchange(ctx, ex, start, apiName{"response.create on", ex.rt.api.String()})
		switch {
		case f != nil:
			s.refuseTurn(ex, *f, lane)
			return nil
		case lease == nil: // the socket ended first
			s.countTurn(ex, outcomeCancelled, "none", "")
			return nil
		}
		ex.admitted(lease)
	}
	t.inFlight()
	return t
}

// inFlight counts the turn in flight from now, its request sent: its
// meter started, its caller's in-flight gauge and its socket's turns up
// until it ends.
func (t *socketTurn) inFlight() {
	ex := t.ex
	t.meter = usage.NewMeter(ex.rt.api, "text/event-stream", ex.ask.inputEstimate)
	ex.upstream.start, ex.upstream.sent = time.Now(), time.Now()
	ex.upstream.gauge = t.s.sk.m.admission.callerInFlight.WithLabelValues(ex.res.Caller)
	ex.upstream.gauge.Inc()
	t.s.turns.Add(1)
}

// requestExchange is a new exchange for a request made on the socket:
// the handshake's caller, class, route and configuration, generating as
// its API's POST does (the handshake was a GET), not yet read or pooled.
func (s *socket) requestExchange() *exchange {
	ex := &exchange{res: s.ex.res, endpoint: s.ex.endpoint, live: s.ex.live, dest: destination{spent: s.ex.dest.spent}, ask: asked{socket: true}}
	ex.rt.generates = !ex.rt.free
	s.sk.records.beginTurn(ex, s)
	return ex
}

// event reads m, an upstream event of the turn, before it goes to the
// client. The first one is the turn's answer beginning, as an HTTP
// answer's status is (answered: a 200 for the adaptive bound).
func (t *socketTurn) event(m *socketMessage) {
	if !t.begun {
		t.begun = true
		t.s.sk.metering.answered(&http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, t.ex)
	}
	t.meter.WriteEvent(m.data())
	t.ex.access.bytesOut += int64(len(m.data()))
}

// complete ends the turn at its terminal event, which event read: its
// usage settled exactly as an HTTP stream's that ended whole.
func (t *socketTurn) complete() {
	u := t.finish(true)
	t.s.sk.metering.settle(t.ex, t.ex.answer(http.StatusOK), u, t.meter.Cut())
	t.end(outcomeForwarded, "200", "")
}

// finish is the turn's usage as its meter read it (complete: its
// terminal event came), served by the model its socket's upstream named
// (socket.served) when its own events named none.
func (t *socketTurn) finish(complete bool) usage.Usage {
	u := t.meter.Finish(complete)
	if p := t.s.served.Load(); u.Model == "" && p != nil {
		u.Model = *p
	}
	return u
}

// serving records the model v names (usage.ServedModel: bounded,
// sanitised) as the one serving the socket's turns; v naming none
// changes nothing.
func (s *socket) serving(v gjson.Result) {
	kept := ""
	if p := s.served.Load(); p != nil {
		kept = *p
	}
	if m := usage.ServedModel(v, kept); m != kept {
		s.served.Store(&m)
	}
}

// refused ends the turn at the upstream's error event that answers it
// with status (a rate limit, an invalid request), header holding what the
// event says of the account as headers would (none, or a retry hint).
// Before anything else of it came, the provider refused it as an HTTP
// status would: the account's state read, the adaptive bound told, its
// token charge given back, nothing spent. After its answer began it is an
// answer cut short by the upstream, settled as such (usageUnknown).
func (t *socketTurn) refused(status int, header http.Header) {
	if !t.begun {
		t.begun = true
		t.s.sk.metering.answered(&http.Response{StatusCode: status, Header: header}, t.ex)
		t.end(outcomeForwarded, statusCode(status), "")
		return
	}
	t.s.sk.metering.settle(t.ex, t.ex.answer(http.StatusOK), t.finish(false), true)
	t.s.sk.m.outcomes.cutShort.WithLabelValues(t.ex.res.Class.String(), socketSideUpstream).Inc()
	t.ex.access.cut = cutByUpstream
	t.end(outcomeForwarded, "200", "")
}

// cut ends a turn still in flight when its socket ended, side having
// ended it: the request reached the provider, which may have generated
// (or go on generating) whatever came of it, so it is settled as an HTTP
// answer cut short is — at its worst case when no usage came
// (usageUnknown) — and its slot freed. An answer that had begun counts
// as forwarded and cut short; one that had not is cancelled when the
// client left, refused upstream_unreachable when the upstream did.
func (t *socketTurn) cut(side string) {
	sk, ex := t.s.sk, t.ex
	var o quota.Outcome // its client left before any answer: nothing to measure
	switch {
	case t.begun:
		o = ex.answer(http.StatusOK)
	case side == socketSideUpstream:
		o = ex.answer(0) // no answer: a failure for the adaptive bound
	}
	sk.metering.settle(ex, o, t.finish(false), true)
	switch {
	case t.begun:
		if side != socketSideUpstream {
			side = socketSideClient // meterproxy cut its client (a bound), as HTTP counts it
		}
		sk.m.outcomes.cutShort.WithLabelValues(ex.res.Class.String(), side).Inc()
		ex.access.cut = side
		t.end(outcomeForwarded, "200", "")
	case side == socketSideUpstream:
		t.end(outcomeRefused, statusCode(http.StatusBadGateway), reasonUnreachable)
	default:
		t.end(outcomeCancelled, "none", "")
	}
}

// end releases the turn — its slot, its caller's in-flight count, its
// upstream's service time — and counts it, once.
func (t *socketTurn) end(outcome, code, reason string) {
	if t.ended {
		return
	}
	t.ended = true
	t.s.sk.metering.endUpstream(t.ex)
	if t.shadowEnd != nil {
		t.shadowEnd()
	}
	t.s.countTurn(t.ex, outcome, code, reason)
	t.s.turns.Add(-1)
	select {
	case t.s.quiet <- struct{}{}:
	default:
	}
}

// countTurn counts a turn of the socket that ended as outcome: in
// meterproxy_requests_total as any request (countAs), and in
// meterproxy_socket_turns_total.
func (s *socket) countTurn(ex *exchange, outcome, code, reason string) {
	s.sk.records.logTurn(ex, outcome, code, reason) // after its settling (settle runs before end)
	s.sk.records.countAs(ex, outcome, code, reason)
	s.sk.m.sockets.turns.WithLabelValues(s.api.name(), ex.res.Class.String(), outcome).Inc()
}

// refuseTurn answers a turn meterproxy refused with an error event, and
// counts it refused.
func (s *socket) refuseTurn(ex *exchange, f refusal, lane string) {
	s.countTurn(ex, outcomeRefused, statusCode(f.status), f.reason)
	_ = s.tell(s.api.errorEvent(f, lane)) // a client gone ends the socket on its own
}

// tellRefusal answers a client's message meterproxy refused before it
// knew what it was (no room in memory for it) with an error event, and
// counts it refused as a request of the socket's caller.
func (s *socket) tellRefusal(f refusal, lane string) {
	s.refuseTurn(s.requestExchange(), f, lane)
}

// socketError is the error event of an OpenAI WebSocket: the HTTP
// status the error would have had, and the error body an HTTP refusal
// carries (refusal.write), with the lane it answers.
type socketError struct {
	Type     string `json:"type"`
	Status   int    `json:"status"`
	StreamID string `json:"stream_id,omitempty"`
	Error    struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// errorEvent is f as the error event that answers a client's request on
// lane ("" for none): the same type, code and message as its HTTP answer.
func errorEvent(f refusal, lane string) []byte {
	e := socketError{Type: "error", Status: f.status, StreamID: lane}
	e.Error.Type, e.Error.Code, e.Error.Message = f.kind, f.reason, f.message
	b, _ := json.Marshal(e) // strings and numbers only: never fails
	return b
}
