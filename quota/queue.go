package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// waiter is one request waiting for admission. While it is queued its
// fields are guarded by its waitQueue's mu, except done, which is closed
// once on grant.
type waiter struct {
	prev, next *waiter
	done       chan struct{}
	granted    bool
	queued     bool
	// err, when set with done closed, is why the waiter was not admitted.
	err error
	// cost is the request's token estimate, charged at admission.
	cost int64
	// held is set once the waiter had to wait for a later window or a
	// released slot, rather than being granted by the first store call.
	held bool
	// gen is its class's shortfall count (classQueue.shortfalls) when the
	// waiter joined.
	gen uint64
	// wait is where it joined and what held it last (Lease.Wait).
	wait gate.Wait
	// fairTag is its place in fair queuing (fair.go).
	fairTag
	// leased is its Lease once granted (lease), made with the waiter
	// rather than apart.
	leased Lease
}

// lease is the Lease of a granted waiter; call it once.
func (w *waiter) lease(leases *ledger, c classify.Class) *Lease {
	s := &w.leased
	*s = Lease{leases: leases, class: c, leaseWait: leaseWait{held: w.held, wait: w.wait}, cost: w.cost}
	if w.tagged && w.weight > 0 {
		s.flow, s.weight = w.flow, w.weight
	}
	return s
}

// queue is an intrusive list of waiters in the order they are to be
// granted (fair.go's, or arrival); removal from the middle is O(1)
// and nothing is allocated beyond the waiter itself. Not safe for
// concurrent use: its waitQueue's mu guards it.
type queue struct {
	head, tail *waiter
	n          int
}

func (q *queue) push(w *waiter) { q.insertBefore(w, nil) }

// insertBefore puts w just before at, or at the tail when at is nil.
func (q *queue) insertBefore(w, at *waiter) {
	prev := q.tail
	if at != nil {
		prev = at.prev
	}
	w.prev, w.next, w.queued = prev, at, true
	if prev != nil {
		prev.next = w
	} else {
		q.head = w
	}
	if at != nil {
		at.prev = w
	} else {
		q.tail = w
	}
	q.n++
}

func (q *queue) remove(w *waiter) {
	if !w.queued {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
}
