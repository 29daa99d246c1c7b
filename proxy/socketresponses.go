package proxy

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
)

// responsesSocket is the Responses API's WebSocket mode: each client
// response.create — the body of a POST /v1/responses with a type, and
// an optional stream_id naming the lane it runs on — is a turn, answered
// by the events of its HTTP stream, on its lane, in order, the turns of
// one lane one after the other.
type responsesSocket struct{}

func (responsesSocket) name() string { return "responses" }

func (responsesSocket) meter(s *socket) socketMeter {
	return &responsesMeter{s: s, lanes: map[string][]laneTurn{}}
}

func (responsesSocket) open(*sockets, *http.Request, *exchange) (func(), *refusal) {
	return func() {}, nil
}

func (responsesSocket) errorEvent(f refusal, lane string) []byte { return errorEvent(f, lane) }

// The Responses WebSocket event types the meter reads.
const (
	responsesCreate     = "response.create"
	responsesError      = "error"
	responsesCompleted  = "response.completed"
	responsesIncomplete = "response.incomplete"
	responsesFailed     = "response.failed"
)

// responsesMeter meters one Responses socket: its turns in flight by
// lane, each lane's first the one its upstream events answer. Safe for
// use by the two hooks at once.
type responsesMeter struct {
	s     *socket
	mu    sync.Mutex
	lanes map[string][]laneTurn
	// seq numbers the turns in the order they were sent.
	seq uint64
}

// laneTurn is a turn in flight on a lane, and its number.
type laneTurn struct {
	t   *socketTurn
	seq uint64
}

// client makes a turn of each response.create — admitted before it goes
// upstream, refused with an error event — and lets every other event
// through. A message whose envelope cannot be read is refused: the
// provider might read it as a request the proxy did not see.
func (r *responsesMeter) client(ctx context.Context, m *socketMessage) bool {
	env, err := readClientEnvelope(m.data())
	if err != nil {
		r.s.tellRefusal(refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: "meterproxy: " + err.Error()}, "")
		return false
	}
	if !env.create {
		return true
	}
	t := r.s.startTurn(ctx, m.body, env.lane)
	if t == nil {
		return false
	}
	r.mu.Lock()
	r.seq++
	r.lanes[env.lane] = append(r.lanes[env.lane], laneTurn{t: t, seq: r.seq})
	r.mu.Unlock()
	return true
}

// upstream reads an event of the upstream into the turn it answers: the
// first in flight of its lane (of the default lane when it names none;
// when that has none, of the oldest lane that has one). A terminal event
// settles it from its usage; an error event answers it (refused). An
// event no turn is in flight for (an error about the connection) only
// passes.
func (r *responsesMeter) upstream(m *socketMessage) {
	ev := readServerEvent(m.data())
	if ev.typ == responsesError && ev.connection {
		return // about the connection, not a turn: the close that follows ends them
	}
	t := r.answered(ev)
	switch {
	case t == nil:
	case ev.typ == responsesError:
		t.refused(ev.status, ev.header)
	case ev.typ == responsesCompleted || ev.typ == responsesIncomplete || ev.typ == responsesFailed:
		t.event(m)
		t.complete()
	default:
		t.event(m)
	}
}

// answered is the turn ev answers, taken off its lane when ev ends it.
func (r *responsesMeter) answered(ev serverEvent) *socketTurn {
	r.mu.Lock()
	defer r.mu.Unlock()
	lane := ev.lane
	if _, ok := r.lanes[lane]; !ok && !ev.named {
		var oldest uint64
		for name, q := range r.lanes {
			if oldest == 0 || q[0].seq < oldest {
				lane, oldest = name, q[0].seq
			}
		}
	}
	q := r.lanes[lane]
	if len(q) == 0 {
		return nil
	}
	t := q[0].t
	if ev.terminal() {
		if len(q) == 1 {
			delete(r.lanes, lane)
		} else {
			r.lanes[lane] = q[1:]
		}
	}
	return t
}

// closed cuts every turn still in flight.
func (r *responsesMeter) closed(side string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for lane, q := range r.lanes {
		for _, lt := range q {
			lt.t.cut(side)
		}
		delete(r.lanes, lane)
	}
}

// clientEnvelope is what the proxy reads of a client event before
// anything else: whether it is a response.create, and its lane.
type clientEnvelope struct {
	create bool
	lane   string
}

// Why a client event's envelope cannot be read.
var (
	errNotObject     = errors.New("a client event must be a JSON object (UTF-8, without a byte order mark)")
	errEnvelopeTwice = errors.New(`a client event names "type" or "stream_id" twice (spellings that differ in case or escapes count as one)`)
	errEnvelopeType  = errors.New(`a client event's "type" and "stream_id" must be strings`)
)

// readClientEnvelope reads a client event's type and stream_id: the
// top-level members whose keys match them as the widest reading any
// provider makes does (case folded, unescaped; usage.ReadRequest's rule).
// It walks the top level only, skipping nested values without parsing
// them (no depth reaches the stack). A type that folds to
// response.create is one. It refuses what the provider could read
// otherwise: anything but an object, a key repeated, a type or lane not a
// string.
func readClientEnvelope(data []byte) (clientEnvelope, error) {
	var env clientEnvelope
	if !isObject(data) {
		return env, errNotObject
	}
	var seenType, seenLane bool
	var err error
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch {
		case strings.EqualFold(k.Str, "type"):
			err = envelopeType(seenType, v)
			seenType, env.create = true, strings.EqualFold(v.Str, responsesCreate)
		case strings.EqualFold(k.Str, "stream_id"):
			switch {
			case seenLane:
				err = errEnvelopeTwice
			case v.Type != gjson.String && v.Type != gjson.Null:
				err = errEnvelopeType
			}
			seenLane, env.lane = true, strings.Clone(v.Str)
		}
		return err == nil
	})
	return env, err
}

// envelopeType checks a client event's "type" field, v: a string, given
// once (seen says one came before). Both socket APIs read it so, as their
// providers would.
func envelopeType(seen bool, v gjson.Result) error {
	switch {
	case seen:
		return errEnvelopeTwice
	case v.Type != gjson.String:
		return errEnvelopeType
	}
	return nil
}

// isObject reports whether data is, past JSON whitespace, an object's
// start.
func isObject(data []byte) bool {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// serverEvent is what the proxy reads of an upstream event: its type,
// its lane (named says it named one); of an error event, its status, the
// headers its HTTP answer would have had (rate limits, retry-after), and
// whether it is about the connection rather than a turn.
type serverEvent struct {
	typ, lane  string
	named      bool
	status     int
	header     http.Header
	connection bool
}

// connectionErrors are the error codes that end a connection, not a
// turn: OpenAI's connection-age limit.
var connectionErrors = []string{"websocket_connection_limit_reached"}

// maxEventHeaders bounds the headers read from an error event.
const maxEventHeaders = 64

// terminal reports whether the event ends the turn it answers.
func (e serverEvent) terminal() bool {
	switch e.typ {
	case responsesError, responsesCompleted, responsesIncomplete, responsesFailed:
		return true
	}
	return false
}

// readHeaders adds the string members of v, an error event's headers
// object, to h — at most maxEventHeaders, the first of each name.
func readHeaders(h http.Header, v gjson.Result) {
	n := 0
	v.ForEach(func(k, val gjson.Result) bool {
		if val.Type == gjson.String && h.Get(k.Str) == "" {
			h.Set(k.Str, val.Str)
		}
		n++
		return n < maxEventHeaders
	})
}

// readServerEvent reads an upstream event's type, stream_id and status
// from its top level (the first of each), its error's code, and the
// headers its HTTP answer would have had: at the top, as Codex reads
// them, or in the error object, as the API reference has them.
// An error event without a status in 100–599 reads as a 400: the
// provider refused the request.
func readServerEvent(data []byte) serverEvent {
	e := serverEvent{header: http.Header{}}
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			if e.typ == "" {
				e.typ = strings.Clone(v.Str)
			}
		case "stream_id":
			if !e.named && v.Type == gjson.String {
				e.lane, e.named = strings.Clone(v.Str), true
			}
		case "status":
			if e.status == 0 && v.Type == gjson.Number {
				e.status = int(v.Int())
			}
		case "headers":
			readHeaders(e.header, v)
		case "error":
			e.connection = e.connection || slices.Contains(connectionErrors, v.Get("code").Str)
			readHeaders(e.header, v.Get("headers"))
		}
		return true
	})
	if e.status < 100 || e.status > 599 {
		e.status = http.StatusBadRequest
	}
	return e
}
