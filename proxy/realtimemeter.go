package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// realtimeMeter meters one Realtime session. A client's response.create
// is a turn admitted before it goes upstream (held as an HTTP request
// is; refused with an error event naming its event_id, the session kept)
// and pending until the provider answers it: with response.created, the
// response it began, or with an error naming its event_id. A
// response.created no pending turn explains is one the provider created
// itself — server voice detection, after the client committed audio —
// which nothing could hold: it is admitted after the fact
// (quota.Admitter.Unheld), counted in
// meterproxy_realtime_unheld_responses_total, and, when its caller's or
// class's budget is spent already, the session is closed (overBudget).
// Every response settles from its response.done's usage into the
// windows, spend and budgets as it arrives, served (the access log's
// model_served) by the model the session.created or session.updated
// event last named; rate_limits.updated is read as the provider's
// x-ratelimit-* headers are. Safe for use by the two
// hooks at once.
type realtimeMeter struct {
	s  *socket
	mu sync.Mutex
	// pending are the turns sent and not answered yet, in the order they
	// were sent; active the responses begun, by response id.
	pending []pendingTurn
	active  map[string]*socketTurn
	// context is the conversation's tokens as of the last response.done
	// (its input and output): the next response's input at least.
	context int64
	// ids numbers the event_ids meterproxy gives response.create events
	// that have none.
	ids uint64
	// checks are the budget checks out (at most one at a time: checking;
	// again asks it to check once more). covering is closed once the
	// check that covers the last unheld response has read the budgets
	// (nil with none out), next the channel of the check again asks for:
	// a response settles only after it, so that a check reads the budgets
	// as they stood when its response began, not after that response
	// spent them.
	checks          sync.WaitGroup
	checking, again bool
	covering, next  chan struct{}
}

// pendingTurn is a turn sent upstream, and the event_id an error
// answering it names.
type pendingTurn struct {
	t  *socketTurn
	id string
}

// sameModel reports whether name is the session's model m: the same
// string, regardless of case for an Azure deployment (as the pools and
// prices match one).
func sameModel(m quota.Model, name string) bool {
	if m.Deployment {
		return strings.EqualFold(m.Name, name)
	}
	return m.Name == name
}

// maxRealtimeTurns bounds a session's responses pending and active at
// once: the provider runs one at a time in a conversation (and a few out
// of band).
const maxRealtimeTurns = 16

// client makes a turn of each response.create — given an event_id of
// meterproxy's when it has none, admitted before it goes upstream — and
// lets every other event through. An event that cannot be read is
// refused: the provider might read it as a request the proxy did not
// see.
func (r *realtimeMeter) client(ctx context.Context, m *socketMessage) bool {
	ev, err := readRealtimeClient(m.data())
	if err != nil {
		r.s.tellRefusal(refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: "meterproxy: " + err.Error()}, "")
		return false
	}
	if ev.namesModel && !sameModel(r.s.ex.ask.model, ev.model) {
		r.s.tellRefusal(refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: this session is metered and priced for model %q, which its handshake named; a session.update may not name another",
				bounded(r.s.ex.ask.model.Name, maxSessionModel))}, ev.eventID)
		return false
	}
	if !ev.create {
		return true
	}
	ref := ev.eventID // the client's own, named in a refusal
	r.mu.Lock()
	busy := len(r.pending)+len(r.active) >= maxRealtimeTurns
	conversation := r.context
	if ev.eventID == "" {
		r.ids++
		ev.eventID = "event_meterproxy_" + strconv.FormatUint(r.ids, 10)
	}
	r.mu.Unlock()
	if busy {
		r.s.tellRefusal(refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: a Realtime session may have at most %d responses in progress at once", maxRealtimeTurns)}, ref)
		return false
	}
	if ref == "" {
		out := withEventID(m.data(), ev.idAt, ev.eventID)
		m.body.charge(int64(cap(out)))
		m.body.buf = out
	}
	data := m.data()
	t := r.s.startTurnWith(ctx, ref, func(ex *exchange) *refusal {
		r.prepare(ex, data, ev.maxOutput, conversation)
		return nil
	})
	if t == nil {
		return false
	}
	r.mu.Lock()
	r.pending = append(r.pending, pendingTurn{t: t, id: ev.eventID})
	r.mu.Unlock()
	return true
}

// prepare reads a response's exchange ex: the session's model, its
// input at least the conversation so far (conversation, in tokens) and
// what the event data shows, hidden (the conversation is the provider's:
// its budgets reserve it at the model's max_input, cut to what they have
// left), its output cap, its charge as ex's dialect charges.
func (r *realtimeMeter) prepare(ex *exchange, data []byte, maxOutput, conversation int64) {
	ex.ask.model, ex.ask.hiddenInput, ex.dest.pooled = r.s.ex.ask.model, true, true
	ex.ask.inputEstimate, ex.ask.outputCap = max(usage.EstimateInput(data), conversation), maxOutput
	ex.ask.cost, ex.ask.settle = ex.dialect.charge(ex.ask.inputEstimate, usage.Request{Model: ex.ask.model.Name, MaxOutput: maxOutput})
}

// upstream reads an upstream event into the response it is about.
func (r *realtimeMeter) upstream(m *socketMessage) {
	ev := readRealtimeServer(m.data())
	switch ev.typ {
	case realtimeCreated:
		r.created(ev.response, m)
	case realtimeDone:
		r.done(ev.response, m)
	case realtimeError:
		r.failed(ev)
	case realtimeRateLimits:
		r.limits(m)
	case realtimeSession, realtimeSessionSet:
		r.s.serving(gjson.GetBytes(m.data(), sessionModelPath))
	default:
		if ev.response == "" {
			return
		}
		r.mu.Lock()
		t := r.active[ev.response]
		r.mu.Unlock()
		if t != nil {
			t.event(m)
		}
	}
}

// created begins response id: the oldest pending turn's, or, with none
// pending, one the provider created itself (unheld), whose session is
// closed when its budget is spent. A response that cannot be told apart
// from another (its id active already, or too many active) is settled
// as cut at once, at its worst case.
func (r *realtimeMeter) created(id string, m *socketMessage) {
	r.mu.Lock()
	var t *socketTurn
	if len(r.pending) > 0 {
		t = r.pending[0].t
		r.pending = r.pending[1:]
	}
	_, dup := r.active[id]
	full := len(r.active) >= maxRealtimeTurns
	r.mu.Unlock()
	unheld := t == nil
	if unheld {
		t = r.unheldTurn()
	}
	t.event(m)
	if dup || full {
		t.cut(socketSideUpstream)
		return
	}
	r.mu.Lock()
	r.active[id] = t
	r.mu.Unlock()
	if unheld {
		r.checkBudget()
	}
}

// done settles response id from its response.done (one whose
// response.created never came as an unheld response's), and keeps its
// tokens as the conversation's.
func (r *realtimeMeter) done(id string, m *socketMessage) {
	r.mu.Lock()
	t := r.active[id]
	delete(r.active, id)
	covering := r.covering
	r.mu.Unlock()
	if covering != nil { // a budget check reads the budgets before this settles (one store round trip)
		<-covering
	}
	if t == nil {
		t = r.unheldTurn()
	}
	t.event(m)
	t.complete()
	if u := t.meter.Finish(true); !u.Estimated { // the usage complete settled
		r.mu.Lock()
		r.context = usage.AddTokens(u.Input, u.Output)
		r.mu.Unlock()
	}
}

// failed ends the pending turn an error event answers (its event_id):
// the provider refused it as an HTTP status would have. An error naming
// none passes.
func (r *realtimeMeter) failed(ev realtimeServer) {
	if ev.answers == "" {
		return
	}
	r.mu.Lock()
	var t *socketTurn
	if i := slices.IndexFunc(r.pending, func(p pendingTurn) bool { return p.id == ev.answers }); i >= 0 {
		t = r.pending[i].t
		r.pending = slices.Delete(r.pending, i, i+1)
	}
	r.mu.Unlock()
	if t != nil {
		t.refused(ev.status(), http.Header{})
	}
}

// limits reads rate_limits.updated as the provider's word on the
// session's account and pool, as its x-ratelimit-* headers are read
// (observe): bulk is held while a bucket is below the interactive
// reserve. Only a session that spends this account is read.
func (r *realtimeMeter) limits(m *socketMessage) {
	s := r.s
	if !s.ex.dest.spent {
		return
	}
	if obs, ok := readRateLimits(m.data()); ok {
		s.sk.metering.heed(s.ex, obs, http.StatusOK, false, refillOf(s.ex.live.Refill, s.ex.dialect, nil), time.Now())
	}
}

// unheldTurn is a turn for a response the provider created itself:
// admitted at once after the fact (quota.Admitter.Unheld), its input at
// least the conversation so far, nothing charged before its
// response.done settles its tokens into the window.
func (r *realtimeMeter) unheldTurn() *socketTurn {
	s, sk := r.s, r.s.sk
	ex := s.requestExchange()
	ex.ask.model, ex.ask.hiddenInput, ex.dest.pooled = s.ex.ask.model, true, true
	r.mu.Lock()
	ex.ask.inputEstimate = r.context
	r.mu.Unlock()
	ex.ask.settle = settleTotal // charged nothing before: the window takes what it reports
	ex.at(s.ex.dest.account, s.ex.dest.pool)
	class := ex.res.Class.String()
	if !ex.live.Shadow {
		ex.admitted(sk.admitter.Unheld(ex.request())) // at quota's pick, as for any lease
		// Admitted at once, after the fact: every turn is admitted or
		// refused in meterproxy_admissions_total.
		l := ex.poolLabels()
		sk.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitAdmitted).Inc()
		sk.m.admission.callerAdmissions.WithLabelValues(l.Account, l.Pool, class, ex.res.Caller).Inc()
	}
	sk.m.realtime.unheld.WithLabelValues(class).Inc()
	t := &socketTurn{s: s, ex: ex}
	t.inFlight()
	return t
}

// checkBudget asks, off the relay, whether the session's caller's or
// class's budget is spent, and closes the session if so (overBudget):
// the provider creates responses the proxy cannot hold. One check runs
// at a time; one asked for meanwhile runs after it. A response.done
// waits for the check out to read the budgets (covering) before it
// settles, so a response never closes its session by its own spend.
func (r *realtimeMeter) checkBudget() {
	s := r.s
	if s.ex.live.Shadow || !s.ex.dest.spent {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checking {
		if !r.again {
			r.again, r.next = true, make(chan struct{})
		}
		r.covering = r.next
		return
	}
	r.checking = true
	read := make(chan struct{})
	r.covering = read
	req := s.ex.request()
	req.Free = false
	r.checks.Go(func() {
		for {
			err := s.sk.admitter.CheckBudgets(s.work, req)
			close(read)
			if e, ok := errors.AsType[*gate.BudgetExceededError](err); ok {
				r.overBudget(e)
			}
			r.mu.Lock()
			again := r.again && s.work.Err() == nil
			next := r.next
			if r.covering == read {
				r.covering = nil
			}
			r.checking, r.again, r.next = again, false, nil
			r.mu.Unlock()
			if !again {
				if next != nil { // asked for, but the session ended: nothing to wait for
					close(next)
				}
				return
			}
			read = next
		}
	})
}

// closeBudgetSpent is the reason of the close that ends a session whose
// budget is spent.
const closeBudgetSpent = "meterproxy: the session's budget is spent"

// overBudget closes the session, its budget e spent while the provider
// goes on creating responses: an error event in the provider's shape
// (insufficient_quota, budget_exceeded), then a close 1008 (policy
// violation) to both sides; the response in progress is settled as cut.
func (r *realtimeMeter) overBudget(e *gate.BudgetExceededError) {
	s := r.s
	f := refusal{status: http.StatusTooManyRequests, reason: reasonBudgetExceeded, kind: "insufficient_quota",
		message: fmt.Sprintf("meterproxy: budget %s is spent (%s of %s this period) and the server's voice detection went on creating responses, "+
			"which meterproxy cannot hold: the session is closed; the budget resets at %s", e.Budget, e.Spent, e.Limit, e.Resets.UTC().Format(time.RFC3339))}
	_ = s.tell(realtimeSocket{}.errorEvent(f, ""))
	s.sk.log.Info("realtime_budget_spent", slog.String("caller", s.ex.res.Caller), slog.String("budget", e.Budget))
	s.finish(socketSideProxy, websocket.StatusPolicyViolation, closeBudgetSpent)
}

// closed waits for a budget check still out, then cuts every response
// still pending or active.
func (r *realtimeMeter) closed(side string) {
	r.checks.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pending {
		p.t.cut(side)
	}
	r.pending = nil
	for id, t := range r.active {
		t.cut(side)
		delete(r.active, id)
	}
}
