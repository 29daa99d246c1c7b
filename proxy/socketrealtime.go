package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// realtimeSocket is OpenAI's Realtime API (and Azure's) over a WebSocket:
// one session a socket, for the model its handshake names. Each client
// response.create is a turn, admitted before it goes upstream; each
// response the provider creates on its own (server voice detection) is
// one too, admitted after the fact (quota.Admitter.Unheld); every
// response settles from its response.done (realtimemeter.go). The
// session is counted on this replica by class and caller, bounded by
// their max_sessions, and refused at its handshake when its budgets are
// spent.
type realtimeSocket struct{}

func (realtimeSocket) name() string { return "realtime" }

func (realtimeSocket) meter(s *socket) socketMeter {
	return &realtimeMeter{s: s, active: map[string]*socketTurn{}}
}

// open reads the session's model from the handshake r — ?model=, or on
// Azure's paths the deployment ?deployment= or ?model= names — into ex,
// with the pool it draws on at ex's account; then counts the session
// under its caller's and class's max_sessions, and asks its budgets
// whether anything is left (none are asked in mode shadow). A refusal
// answers the handshake as an HTTP request's would be.
func (realtimeSocket) open(sk *sockets, r *http.Request, ex *exchange) (func(), *refusal) {
	m, f := sessionModel(ex.rt, r.URL.Query())
	if f != nil {
		return nil, f
	}
	ex.ask.model, ex.dest.pooled = m, true
	ex.at(ex.dest.account, sk.admitter.PoolAt(ex.dest.account, func() quota.Model { return m }))
	shadow := ex.live.Shadow
	exit := func() {}
	if !shadow {
		var bad *refusal
		if exit, bad = sk.sessions.enter(ex.res, ex.live.Sessions); bad != nil {
			return nil, bad
		}
		if f := sessionBudgets(r.Context(), sk.admitter, ex); f != nil {
			exit()
			return nil, f
		}
	}
	gauge := sk.m.realtime.sessions.WithLabelValues(ex.res.Class.String(), ex.res.Caller)
	gauge.Inc()
	return func() {
		gauge.Dec()
		exit()
	}, nil
}

// sessionBudgets refuses a session whose caller's or class's budget is
// spent, or whose model its budgets cannot price, as an HTTP request of
// it would be refused; nil when they leave room, or when the session
// spends another account (a caller's own key).
func sessionBudgets(ctx context.Context, admitter *quota.Admitter, ex *exchange) *refusal {
	req := ex.request()
	req.Free = !ex.dest.spent
	err := admitter.CheckBudgets(ctx, req)
	if err == nil {
		return nil
	}
	f, _ := reasonOf(err, ex.res.Class, apiName{verb: "a Realtime session"})
	if e, ok := errors.AsType[*gate.BudgetExceededError](err); ok {
		f.message = fmt.Sprintf("meterproxy: budget %s is spent: %s of %s this period; it resets at %s",
			e.Budget, e.Spent, e.Limit, e.Resets.UTC().Format(time.RFC3339))
	}
	return &f
}

// maxSessionModel bounds the model a handshake names.
const maxSessionModel = 256

// sessionModel is the model a Realtime handshake's query q names on rt:
// ?model=, or on Azure's paths the deployment ?deployment= (else
// ?model=) names, a deployment name usage.ValidDeployment accepts. None
// named is the zero Model. A name repeated, too long or not UTF-8 is
// refused: the provider could read another.
func sessionModel(rt route, q url.Values) (quota.Model, *refusal) {
	key, azure := "model", rt.family == familyAzure
	if azure && q.Has("deployment") {
		key = "deployment"
	}
	bad := func(why string) (quota.Model, *refusal) {
		return quota.Model{}, &refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: "meterproxy: the query parameter " + key + " " + why}
	}
	vs := q[key]
	switch {
	case len(vs) == 0:
		return quota.Model{}, nil
	case len(vs) > 1:
		return bad("is given more than once: meterproxy and the provider could read different models")
	case len(vs[0]) > maxSessionModel || !utf8.ValidString(vs[0]):
		return bad(fmt.Sprintf("must be UTF-8 of at most %d bytes", maxSessionModel))
	case azure && !usage.ValidDeployment(vs[0]):
		return bad("must be a deployment name: letters, digits, '-', '_' and '.', not ending in '.'")
	}
	return quota.Model{Name: vs[0], Deployment: azure}, nil
}

// errorEvent is f as a Realtime error event answering the client event
// whose event_id is ref ("" for none): OpenAI's shape, the error's type,
// code and message those of f's HTTP answer.
func (realtimeSocket) errorEvent(f refusal, ref string) []byte {
	type detail struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
		EventID *string `json:"event_id"`
	}
	e := struct {
		Type    string `json:"type"`
		EventID string `json:"event_id"`
		Error   detail `json:"error"`
	}{Type: "error", EventID: serverEventID(), Error: detail{Type: f.kind, Code: f.reason, Message: f.message}}
	if ref != "" {
		e.Error.EventID = &ref
	}
	b, _ := json.Marshal(e) // strings only: never fails
	return b
}

// serverEventID is a fresh id for an event meterproxy sends itself, as
// every Realtime server event has one.
func serverEventID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "event_meterproxy_" + hex.EncodeToString(b[:])
}
