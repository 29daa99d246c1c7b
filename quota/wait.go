package quota

import (
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// heldBy names b as Wait.HeldBy does; a shortfall with no blocker (a
// store that named none) counts as the window's.
func heldBy(b store.Blocker) string {
	switch b {
	case store.BlockedByInFlight:
		return gate.HeldByInFlight
	case store.BlockedByUpstream:
		return gate.HeldByUpstream
	case store.BlockedByOutput:
		return gate.HeldByOutput
	}
	return gate.HeldByWindow
}

// Wait is what the lease's request waited for before it was admitted:
// at its pool when it was held there, else at its caller's gates.
func (s *Lease) Wait() gate.Wait {
	w := s.wait
	if w.HeldBy == "" && s.gate.Held {
		w.HeldBy = s.gate.HeldBy
	}
	return w
}
