package proxy

import "sync/atomic"

// memBudget bounds the bytes of request bodies held in memory at once,
// across the process: server.max_body_memory_bytes. max_queue bounds how
// many requests wait, not how big they are; this bounds the bytes, held
// requests included, so no number of connections declaring large bodies
// can take the process past it. It is safe for concurrent use.
type memBudget struct {
	limit int64
	used  atomic.Int64
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

// force charges n bytes whether or not they fit.
func (m *memBudget) force(n int64) { m.used.Add(n) }

// give returns n bytes.
func (m *memBudget) give(n int64) { m.used.Add(-n) }

// inUse returns the bytes charged now.
func (m *memBudget) inUse() int64 { return m.used.Load() }
