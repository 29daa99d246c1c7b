package quota

// unknownShare is the unknown callers' part of a class's fair queuing: all
// of them together weigh as one caller of weight 1, and among themselves
// they share that by credential, by the same start-time fair queuing.
// Without it every made-up key was a caller of its own: one client with 64
// keys took 64 shares against configured callers of weight 1.
//
// Two levels of tags: a waiter's sub tag orders it among the unknown
// callers (its credential's flow, at the unknown callers' own virtual
// time); its start tag in the class is one of the share's turns, handed out
// like a single flow's (each the later of the class's virtual time and the
// share's finish, the finish then moved by the waiter's span). The turns go
// to the unknown callers' waiters in order of sub tags: a waiter whose sub
// tag comes before queued ones takes the first of their turns and each of
// them moves to the next, the last to the new turn. So a newcomer key is
// served at the share's next turn, and the share as a whole never runs
// ahead of one caller's pace, however many keys it holds. Costs of uneven
// size make the share approximate: a turn is as long as the span of the
// waiter it was made for.
//
// Guarded, with the rest of fairShare, by its waitQueue's mu. The zero value is an
// empty share.
type unknownShare struct {
	// vtime is the unknown callers' virtual time: the sub tag of the last
	// of their waiters granted.
	vtime float64
	// finish is where the share's next turn starts, in the class's
	// virtual time.
	finish float64
	// last is the start of the last turn handed out, while no later one
	// was and it was not given back (-1 after); only that one can be
	// given back to the share.
	last float64
	// head and tail are the unknown callers' queued waiters, in order of
	// sub tags (arrival order among equals), linked by uprev and unext.
	// Their start tags ascend in the same order, and q keeps them in it.
	head, tail *waiter
}

// enqueueUnknown tags w, an unknown caller's waiter, with its sub tag and
// a turn of the unknown callers' share, and puts it into q.
func (f *fairShare) enqueueUnknown(q *queue, w *waiter) {
	u := &f.unknown
	w.sub = f.tag(w.flow, w.span, u.vtime)
	turn := max(f.vtime, u.finish)
	if u.tail != nil {
		turn = max(turn, u.tail.tag) // a correction may have moved finish back
	}
	u.finish, u.last = turn+w.span, turn
	after := u.tail // w goes after every waiter with its sub tag or less
	for after != nil && after.sub > w.sub {
		after = after.uprev
	}
	later := u.head
	if after != nil {
		later = after.unext
	}
	u.link(w, after)
	// w takes the turn and place in q of the first waiter it goes before,
	// that one the next one's, and the last the new turn.
	moving := w
	for next := later; next != nil; next = next.unext {
		moving.tag = next.tag
		q.insertBefore(moving, next)
		q.remove(next)
		moving = next
	}
	moving.tag = turn
	q.insertByTag(moving)
}

// dequeueUnknown records that w, an unknown caller's waiter, left q:
// granted, the unknown callers' virtual time and the class's move to it;
// leaving ungranted, it gives back its credential's reservation and, if it
// held the share's last turn, that turn. A turn given up in the middle
// stays spent, as a configured caller's does.
func (f *fairShare) dequeueUnknown(w *waiter) {
	u := &f.unknown
	u.unlink(w)
	if w.granted {
		if w.tag == u.last {
			u.last = -1 // served: no longer to give back
		}
		u.vtime = max(u.vtime, w.sub)
		f.granted(w.tag)
		return
	}
	f.untag(w.flow, w.sub, w.span)
	if w.tag == u.last {
		u.finish, u.last = w.tag, -1
	}
}

// link puts w after after in the unknown callers' order, first when after
// is nil.
func (u *unknownShare) link(w, after *waiter) {
	w.uprev = after
	if after != nil {
		w.unext, after.unext = after.unext, w
	} else {
		w.unext, u.head = u.head, w
	}
	if w.unext != nil {
		w.unext.uprev = w
	} else {
		u.tail = w
	}
}

// unlink takes w out of the unknown callers' order.
func (u *unknownShare) unlink(w *waiter) {
	if w.uprev != nil {
		w.uprev.unext = w.unext
	} else if u.head == w {
		u.head = w.unext
	}
	if w.unext != nil {
		w.unext.uprev = w.uprev
	} else if u.tail == w {
		u.tail = w.uprev
	}
	w.uprev, w.unext = nil, nil
}
