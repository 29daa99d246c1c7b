package proxy

import (
	"net/http"
	"strconv"
	"time"
)

// begin starts ex's record: the request r arrived at start; its id
// (the caller's X-Request-Id when sane, else a new one) answers in w's
// X-Request-Id, and goes upstream (rewrite, dialSocket).
func (h *Handler) begin(ex *exchange, w http.ResponseWriter, r *http.Request, start time.Time) {
	ex.in, ex.access.start, ex.access.requestID = r, start, h.ids.of(r.Header)
	w.Header()[requestIDHeader] = []string{ex.access.requestID}
}

// beginTurn starts the record of a turn on socket s, made now.
func (h *Handler) beginTurn(ex *exchange, s *socket) {
	ex.access.start, ex.access.requestID, ex.access.session = time.Now(), h.ids.next(), s.ex.access.requestID
	ex.access.stream = true
}

// logged hands line rec to the access log, counting it dropped when the
// queue is full; nothing when the access log is off.
func (h *Handler) logged(rec accessRecord) {
	if !h.access.send(rec) {
		h.m.accessDropped.Inc()
	}
}

// logExchange writes the line of an HTTP request, or of a WebSocket
// handshake that opened no socket, as it ends (count): after its answer
// settled, so its tokens and cost are in.
func (h *Handler) logExchange(ex *exchange) {
	if h.access == nil {
		return
	}
	kind, outcome, reason := kindRequest, outcomeNegotiated, ex.rec.negotiated
	if ex.socket {
		kind = kindSession
	}
	if reason == "" {
		outcome, _ = ex.rec.outcome()
		reason = ex.rec.refused
	}
	if reason == "" && ex.access.cut == cutByMeterproxy {
		reason = ex.rec.cutFor()
	}
	h.logged(recordOf(ex, kind, outcome, ex.rec.status, reason, time.Now()))
}

// logTurn writes the line of a socket turn that ended as outcome with
// code (a status, or "none"), refused for reason: after it settled.
func (h *Handler) logTurn(ex *exchange, outcome, code, reason string) {
	if h.access == nil {
		return
	}
	status, _ := strconv.Atoi(code) // "none": 0
	h.logged(recordOf(ex, kindTurn, outcome, status, reason, time.Now()))
}

// logSession writes the line of a WebSocket session that opened, once it
// closed, side having ended it; its turns have lines of their own, and
// carry its tokens and cost.
func (h *Handler) logSession(ex *exchange, side string) {
	if h.access == nil {
		return
	}
	h.logged(recordOf(ex, kindSession, outcomeForwarded, http.StatusSwitchingProtocols, side, time.Now()))
}

// cutBy records who cut ex's answer short: side (client, upstream), or
// meterproxy when it cut the client off itself (recorder.cutFor).
func (ex *exchange) cutBy(side string) {
	if ex.rec != nil && ex.rec.cutFor() != "" {
		side = cutByMeterproxy
	}
	ex.access.cut = side
}
