package proxy

import "sync/atomic"

// memBudget bounds the bytes of request bodies held in memory at once,
// across the process: server.max_body_memory_bytes. max_queue bounds how
// many requests wait, not how big they are; this bounds the bytes, held
// requests included, so no number of connections declaring large bodies
// can take the process past it. It is safe for concurrent use.
//
// Answers read ahead of their clients (readahead.go) are charged to it
// too, within their own ceiling, aheadShare of it: the rest is always
// there for request bodies.
type memBudget struct {
	limit int64
	used  atomic.Int64
	// ahead is the part of used that answers read ahead hold.
	ahead atomic.Int64
}

// interactiveKeeps is the part of the budget only interactive requests may
// use: a flood of other traffic (every unknown caller is bulk unless a
// path rule says otherwise) cannot keep an interactive request's body out.
const interactiveKeeps = 4 // a quarter

func newMemBudget(limit int64) *memBudget { return &memBudget{limit: limit} }

// take charges n bytes if they fit: within the whole budget for an
// interactive request, within all but the quarter interactive keeps for
// any other. It reports whether it did.
func (m *memBudget) take(n int64, interactive bool) bool {
	limit := m.limit
	if !interactive {
		limit -= m.limit / interactiveKeeps
	}
	for {
		used := m.used.Load()
		if used+n > limit {
			return false
		}
		if m.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// aheadShare is the most of the budget answers read ahead may hold: a
// half.
const aheadShare = 2

// takeAhead charges n bytes of an answer read ahead if they fit within
// the answers' half of the budget and within the budget as take counts
// it (interactive is the answer's class). It reports whether it did.
func (m *memBudget) takeAhead(n int64, interactive bool) bool {
	for {
		ahead := m.ahead.Load()
		if ahead+n > m.limit/aheadShare {
			return false
		}
		if m.ahead.CompareAndSwap(ahead, ahead+n) {
			break
		}
	}
	if !m.take(n, interactive) {
		m.ahead.Add(-n)
		return false
	}
	return true
}

// forceAhead charges n bytes of an answer read ahead whether or not they
// fit.
func (m *memBudget) forceAhead(n int64) { m.ahead.Add(n); m.used.Add(n) }

// giveAhead returns n bytes of an answer read ahead.
func (m *memBudget) giveAhead(n int64) { m.ahead.Add(-n); m.used.Add(-n) }

// force charges n bytes whether or not they fit.
func (m *memBudget) force(n int64) { m.used.Add(n) }

// give returns n bytes.
func (m *memBudget) give(n int64) { m.used.Add(-n) }

// inUse returns the bytes charged now.
func (m *memBudget) inUse() int64 { return m.used.Load() }
