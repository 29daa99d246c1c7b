package quota

import "github.com/meterproxy/meterproxy/quota/store"

// Wait is what a request's admission waited for, for a trace of it:
// where it stood in its queue and what held it. Its zero value is a
// request admitted at once, nobody queued ahead of it. Reading it costs
// nothing: it is filled where the wait loop decides, under the locks it
// already holds.
type Wait struct {
	// Queued is how many requests of its class were waiting at its pool
	// when it joined the queue there (0 when admitted at once, or from the
	// credits). With fair queuing its turn may come before some of them.
	Queued int
	// HeldBy names what held it last, "" when nothing did: one of the
	// Held* names.
	HeldBy string
}

// The names Wait.HeldBy gives what held a request.
const (
	// HeldByWindow: its class's allowance of the second (requests or
	// tokens per minute) was spent; it waited for a later second.
	HeldByWindow = "window"
	// HeldByInFlight: the pool's in-flight bound was reached; it waited
	// for a slot to be released.
	HeldByInFlight = "in_flight"
	// HeldByUpstream: bulk was held on the upstream's word — its
	// rate-limit headers below the interactive reserve, a 429's
	// retry-after — or by the output budget.
	HeldByUpstream = "upstream_hold"
	// HeldByOutput: interactive waited for the output tokens per minute
	// budget.
	HeldByOutput = "output_budget"
	// HeldByCap: its caller's own cap (callers[].max_in_flight,
	// requests_per_minute).
	HeldByCap = "cap"
	// HeldByBudget: a spend budget whose room others' reservations held.
	HeldByBudget = "budget"
)

// heldBy names b as Wait.HeldBy does; a shortfall with no blocker (a
// store that named none) counts as the window's.
func heldBy(b store.Blocker) string {
	switch b {
	case store.BlockedByInFlight:
		return HeldByInFlight
	case store.BlockedByUpstream:
		return HeldByUpstream
	case store.BlockedByOutput:
		return HeldByOutput
	}
	return HeldByWindow
}

// Wait is what the lease's request waited for before it was admitted:
// at its pool when it was held there, else at its caller's gates.
func (s *Lease) Wait() Wait {
	w := s.wait
	if w.HeldBy == "" && s.gate.held {
		w.HeldBy = s.gate.heldBy
	}
	return w
}
