package proxy

import (
	"net/http"
	"strconv"
	"time"
)

// records is the part of the handler that records how each request ended,
// once: its outcome in the metrics and its trace span (count, countAs),
// and its line in the access log (logExchange, logTurn, logSession), with
// the request id it began with (begin, beginTurn). Safe for concurrent
// use.
type records struct {
	shared
	// access is the access log (nil: off); ids makes request ids.
	access *AccessLog
	ids    requestIDs
	// decisions is server.decision_headers: every answer says how its
	// request was treated (decision.go).
	decisions bool
}

// begin starts ex's record: the request r arrived at start; its id
// (the caller's X-Request-Id when sane, else a new one) answers in w's
// X-Request-Id, and goes upstream (rewrite, sockets.dial); its answer
// will carry the decision headers when they are on.
func (rs *records) begin(ex *exchange, w http.ResponseWriter, r *http.Request, start time.Time) {
	ex.dest.in, ex.access.start, ex.access.requestID = r, start, rs.ids.of(r.Header)
	w.Header()[requestIDHeader] = ex.rec.slots.value(slotRequestID, ex.access.requestID)
	if rs.decisions {
		ex.rec.decide = ex
	}
}

// beginTurn starts the record of a turn on socket s, made now.
func (rs *records) beginTurn(ex *exchange, s *socket) {
	ex.access.start, ex.access.requestID, ex.access.session = time.Now(), rs.ids.next(), s.ex.access.requestID
	ex.access.stream = true
}

// logged hands line rec to the access log, counting it dropped when the
// queue is full; nothing when the access log is off.
func (rs *records) logged(rec accessRecord) {
	if !rs.access.send(rec) {
		rs.m.accessDropped.Inc()
	}
}

// logExchange writes the line of an HTTP request, or of a WebSocket
// handshake that opened no socket, as it ends (count): after its answer
// settled, so its tokens and cost are in.
func (rs *records) logExchange(ex *exchange) {
	if rs.access == nil {
		return
	}
	kind, outcome, reason := kindRequest, outcomeNegotiated, ex.rec.negotiated
	if ex.ask.socket {
		kind = kindSession
	}
	if reason == "" {
		outcome, _ = ex.rec.outcome()
		reason = ex.rec.refused
	}
	if reason == "" && ex.access.cut == cutByMeterproxy {
		reason = ex.rec.cutFor()
	}
	rs.logged(recordOf(ex, kind, outcome, ex.rec.status, reason, time.Now()))
}

// logTurn writes the line of a socket turn that ended as outcome with
// code (a status, or "none"), refused for reason: after it settled.
func (rs *records) logTurn(ex *exchange, outcome, code, reason string) {
	if rs.access == nil {
		return
	}
	status, _ := strconv.Atoi(code) // "none": 0
	rs.logged(recordOf(ex, kindTurn, outcome, status, reason, time.Now()))
}

// logSession writes the line of a WebSocket session that opened, once it
// closed, side having ended it; its turns have lines of their own, and
// carry its tokens and cost.
func (rs *records) logSession(ex *exchange, side string) {
	if rs.access == nil {
		return
	}
	rs.logged(recordOf(ex, kindSession, outcomeForwarded, http.StatusSwitchingProtocols, side, time.Now()))
}

// count records how ex's request ended, once, when ServeHTTP ends:
// meterproxy_requests_total by its outcome (recorder.outcome) and, for a
// refusal, meterproxy_refusals_total by its reason — or, for a front-door
// negotiation, meterproxy_negotiations_total alone: it asked nothing of
// an API, so it is no request of a class. It is the only place any of
// them is counted, so every request is counted exactly once.
func (rs *records) count(ex *exchange) {
	rs.logExchange(ex)
	if ex.rec.negotiated != "" {
		rs.m.outcomes.negotiations.WithLabelValues(ex.rec.negotiated).Inc()
		rs.tr.end(ex, outcomeRefused, statusCode(ex.rec.status), ex.rec.negotiated)
		return
	}
	outcome, code := ex.rec.outcome()
	rs.countAs(ex, outcome, code, ex.rec.refused)
}

// countAs counts ex's request ended as outcome with code, refused for
// reason when outcome is refused: what count does for an HTTP request,
// and a socket turn's end (socketturn.go) does for a turn.
func (rs *records) countAs(ex *exchange, outcome, code, reason string) {
	class := ex.res.Class.String()
	if outcome == outcomeRefused {
		l := ex.poolLabels()
		rs.m.outcomes.refusals.WithLabelValues(l.Account, l.Pool, class, reason).Inc()
	}
	rs.m.outcomes.requests.WithLabelValues(class, ex.res.Caller, outcome, code).Inc()
	rs.tr.end(ex, outcome, code, reason)
}
