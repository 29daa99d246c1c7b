package quota

import "github.com/meterproxy/meterproxy/internal/configcheck"

// Fairness is classes.<class>.fairness: how a class's grants are shared
// between its callers.
type Fairness string

// The fairness modes.
const (
	// FairCallers shares a class between its callers by weight
	// (callers[].weight), each caller's own requests first come, first
	// served.
	FairCallers Fairness = "callers"
	// FairFIFO serves the class first come, first served, whoever sent.
	FairFIFO Fairness = "fifo"
)

// fairnessModes are the classes.<class>.fairness values.
var fairnessModes = []Fairness{FairCallers, FairFIFO}

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// names another mode is refused at load, by key.
func (f *Fairness) UnmarshalText(b []byte) error { return configcheck.SetOneOf(f, b, fairnessModes...) }

// fairShare is one class's fair queuing between callers, by start-time
// fair queuing (SFQ): a waiter's start tag is the later of the class's
// virtual time and its caller's last finish tag, its finish tag the start
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
type fairShare struct {
	on     bool
	vtime  float64
	finish map[string]float64 // each caller's last finish tag
}

// maxFairFlows bounds finish: past it, callers whose last finish the
// virtual time has passed (they would start at the virtual time anyway)
// are forgotten.
const maxFairFlows = 1024

// tag returns the start tag of a waiter of flow whose cost over its
// caller's weight is span, and records its finish.
func (f *fairShare) tag(flow string, span float64) float64 {
	if f.finish == nil {
		f.finish = map[string]float64{}
	}
	start := max(f.vtime, f.finish[flow])
	f.finish[flow] = start + span
	return start
}

// untag gives back a waiter's reservation when it leaves ungranted, if no
// later waiter of its flow was tagged after it.
func (f *fairShare) untag(flow string, start, span float64) {
	if end, ok := f.finish[flow]; ok && end == start+span {
		f.finish[flow] = start
	}
}

// granted advances the virtual time to a granted waiter's start tag.
func (f *fairShare) granted(start float64) {
	f.vtime = max(f.vtime, start)
	if len(f.finish) > maxFairFlows {
		for flow, end := range f.finish {
			if end <= f.vtime {
				delete(f.finish, flow)
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
