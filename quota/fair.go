package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// fairness is classes.<class>.fairness: how a class's grants are shared
// between its callers.
type fairness string

// The fairness modes.
const (
	// fairCallers shares a class between its callers by weight
	// (callers[].weight), each caller's own requests first come, first
	// served.
	fairCallers fairness = "callers"
	// fairFIFO serves the class first come, first served, whoever sent.
	fairFIFO fairness = "fifo"
)

// fairnessModes are the classes.<class>.fairness values.
var fairnessModes = []fairness{fairCallers, fairFIFO}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another mode is refused at load, by key.
func (f *fairness) UnmarshalText(b []byte) error { return configcheck.SetOneOf(f, b, fairnessModes...) }

// fairShare is one class's fair queuing between callers, by start-time
// fair queuing (SFQ): a waiter's start tag is the later of the class's
// virtual time and its flow's last finish tag, its finish tag the start
// plus its cost over the caller's weight, and the queue is kept in order
// of start tags (arrival order among equals). The virtual time is the
// start tag of the last waiter granted.
//
// Why SFQ rather than deficit round robin or finish-tag WFQ: ordering by
// start tags puts a caller that was idle at the virtual time, ahead of
// every backlogged caller's next request, so a newcomer is served in the
// very next grant; an idle caller banks nothing (its start is never below
// the virtual time); a caller alone is served back to back; and the costs
// can be uneven (tokens) with no quantum to tune. It orders the queue the
// store call lists from, so the store and every other part of admission
// are unchanged. The zero value is off (FIFO).
//
// A flow is a configured caller, or one unknown caller's credential (see
// flowOf). Unknown callers together weigh as one caller of weight 1, and
// share that among themselves by credential (unknownShare), so made-up keys
// buy no more of the class than one caller has. The state is bounded:
// configured callers by the config, unknown credentials by maxAnonFlows.
type fairShare struct {
	on     bool
	vtime  float64
	finish map[flowKey]float64 // each flow's last finish tag
	// anon counts the unknown callers' own flows in finish.
	anon int
	// unknown is the unknown callers' one share of the class.
	unknown unknownShare
}

// fairTag is a waiter's place in its class's fair queuing, set and read
// only by fairShare and unknownShare (under the wait queue's lock, as the
// rest of the waiter).
type fairTag struct {
	// flow, span and tag are its caller, what it costs the class over the
	// caller's weight, and its start tag; tagged says it was queued fairly
	// (not under fifo).
	flow      flowKey
	span, tag float64
	tagged    bool
	// sub is an unknown caller's start tag among unknown callers, and
	// uprev, unext its neighbours in their order (unknownShare).
	sub          float64
	uprev, unext *waiter
	// weight is its caller's weight, when its span is counted in tokens
	// (0 when in requests): Lease.Settle moves its flow's finish by the
	// real tokens over it.
	weight float64
}

// flowKey names a flow: a configured caller by name; an unknown caller by
// its credential's keyed hash (classify.Result.Anonymous) under the name
// classify.UnknownCaller, or with anon 0 the flow every unknown caller
// without one of its own shares.
type flowKey struct {
	caller string
	anon   uint64
}

// unknown reports whether the flow is an unknown caller's: a part of the
// unknown callers' one share.
func (k flowKey) unknown() bool { return k.caller == classify.UnknownCaller }

// maxAnonFlows bounds how many unknown callers' credentials get a flow of
// their own in a class; past it, a new credential shares the one flow of
// unknown callers until one of the others falls idle. Bounded this way, a
// flood of made-up keys gets at most maxAnonFlows shares of the class, not
// one per key, and costs a bounded map.
const maxAnonFlows = 64

// maxFairFlows bounds finish against reloads that rename callers: past it,
// flows whose last finish the virtual time has passed (they would start at
// the virtual time anyway) are forgotten.
const maxFairFlows = 1024

// flowOf is the flow of a request of caller whose credential hashes to anon
// (0 for a configured caller or none).
func (f *fairShare) flowOf(caller string, anon uint64) flowKey {
	k := flowKey{caller: caller, anon: anon}
	if anon == 0 {
		return k
	}
	if _, ok := f.finish[k]; ok {
		return k
	}
	if f.anon >= maxAnonFlows {
		f.forgetIdle()
	}
	if f.anon >= maxAnonFlows {
		k.anon = 0
	}
	return k
}

// enqueue tags w, a waiter of a fair class, and puts it into q in order of
// start tags.
func (f *fairShare) enqueue(q *queue, w *waiter) {
	if w.flow.unknown() {
		f.enqueueUnknown(q, w)
		return
	}
	w.tag = f.tag(w.flow, w.span, f.vtime)
	q.insertByTag(w)
}

// dequeue takes w, a tagged waiter, out of q: granted, the virtual time
// moves to its start; leaving ungranted, it gives its reservation back.
func (f *fairShare) dequeue(q *queue, w *waiter) {
	q.remove(w)
	switch {
	case w.flow.unknown():
		f.dequeueUnknown(w)
	case w.granted:
		f.granted(w.tag)
	default:
		f.untag(w.flow, w.tag, w.span)
	}
}

// tag returns the start tag of a waiter of flow whose cost over its
// caller's weight is span, at virtual time vtime, and records its finish.
func (f *fairShare) tag(flow flowKey, span, vtime float64) float64 {
	if f.finish == nil {
		f.finish = map[flowKey]float64{}
	}
	end, ok := f.finish[flow]
	if !ok && flow.anon != 0 {
		f.anon++
	}
	start := max(vtime, end)
	f.finish[flow] = start + span
	return start
}

// untag gives back a waiter's reservation when it leaves ungranted, if no
// later waiter of its flow was tagged after it.
func (f *fairShare) untag(flow flowKey, start, span float64) {
	if end, ok := f.finish[flow]; ok && end == start+span {
		f.finish[flow] = start
	}
}

// correct moves flow's finish by delta (the request's real cost less its
// estimate, over the caller's weight), so its next requests start where
// its real service says; a flow forgotten meanwhile is idle and starts at
// the virtual time anyway. An unknown caller's moves the unknown callers'
// share too.
func (f *fairShare) correct(flow flowKey, delta float64) {
	if end, ok := f.finish[flow]; ok {
		f.finish[flow] = end + delta
	}
	if flow.unknown() {
		f.unknown.finish += delta
	}
}

// granted advances the virtual time to a granted waiter's start tag.
func (f *fairShare) granted(start float64) {
	f.vtime = max(f.vtime, start)
	if len(f.finish) > maxFairFlows {
		f.forgetIdle()
	}
}

// forgetIdle forgets the flows whose last finish the virtual time has
// passed (the unknown callers' own, for theirs): their next request starts
// at the virtual time with or without them.
func (f *fairShare) forgetIdle() {
	for flow, end := range f.finish {
		vtime := f.vtime
		if flow.unknown() {
			vtime = f.unknown.vtime
		}
		if end <= vtime {
			delete(f.finish, flow)
			if flow.anon != 0 {
				f.anon--
			}
		}
	}
}

// insertByTag puts w into q in order of start tags, after every waiter
// with the same tag or less.
func (q *queue) insertByTag(w *waiter) {
	if q.tail == nil || q.tail.tag <= w.tag {
		q.push(w)
		return
	}
	at := q.head
	for at.tag <= w.tag {
		at = at.next
	}
	q.insertBefore(w, at)
}
