package proxy

import (
	"net/http"
	"strconv"
)

// The decision headers (server.decision_headers): how meterproxy treated
// a request, on its answer. Every value is a closed set or a configured
// name, never a key nor anything the caller sent: the class, the account
// and pool as metrics label them (quota.LabelsOf), and a whole number of
// milliseconds.
const (
	headerClass   = "X-Meterproxy-Class"
	headerAccount = "X-Meterproxy-Account"
	headerPool    = "X-Meterproxy-Pool"
	headerQueueMs = "X-Meterproxy-Queue-Ms"
)

// decisionHeaders are the decision headers, each deleted before it is
// set: an upstream's own never reaches the caller as meterproxy's.
var decisionHeaders = []string{headerClass, headerAccount, headerPool, headerQueueMs}

// setDecision sets ex's decision headers on h, as its answer is written
// (recorder.decide): the class it was counted in; once its pool is known,
// the account and pool it was served at (after a spill, the account it
// moved to) and how long it waited for admission (0 in mode shadow, which
// forwards at once, and for batches and uploads, which do not wait). A
// WebSocket's 101 says the class and the account the socket is pinned
// to; its turns are admitted one by one, so it says no wait. The values
// are held in slots (the recorder's), not made for each header.
func setDecision(h http.Header, ex *exchange, slots *headerSlots) {
	for _, k := range decisionHeaders {
		delete(h, k) // the names are canonical
	}
	h[headerClass] = slots.value(slotClass, ex.res.Class.String())
	l := ex.poolLabels()
	switch {
	case l != noPool:
		h[headerAccount] = slots.value(slotAccount, l.Account)
		h[headerPool] = slots.value(slotPool, l.Pool)
		if !ex.ask.socket {
			h[headerQueueMs] = slots.value(slotQueueMs, strconv.FormatInt(ex.access.waited.Milliseconds(), 10))
		}
	case ex.ask.socket && ex.dest.labels.Account != "":
		h[headerAccount] = slots.value(slotAccount, ex.dest.labels.Account)
	}
}
