package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Limits returns the fleet-wide limits.
func (c Config) Limits() store.Limits { return c.scaled(1) }

// PerReplica returns the fleet limits divided by account.expected_replicas:
// what one replica enforces on its own (the in-process store, and the local
// fallback when Redis fails).
func (c Config) PerReplica() store.Limits { return c.scaled(c.Account.ExpectedReplicas) }

func (c Config) scaled(replicas int64) store.Limits {
	if replicas < 1 {
		replicas = 1
	}
	inv := 1 / float64(replicas)
	ic, bc := c.Classes.Interactive, c.Classes.Bulk
	rpm := c.Account.requestsPerMinute()
	l := store.Limits{
		AccountRPM:       adaptive.Part(rpm, inv),
		BulkRPM:          adaptive.Part(rpm, bc.Share*inv),
		ReserveRPM:       adaptive.Part(rpm, ic.Reserve*inv),
		Borrow:           bc.Borrow,
		AccountTPM:       adaptive.Part(c.Account.TokensPerMinute, inv),
		BulkTPM:          adaptive.Part(c.Account.TokensPerMinute, bc.Share*inv),
		ReserveTPM:       adaptive.Part(c.Account.TokensPerMinute, ic.Reserve*inv),
		OutputTPM:        adaptive.Part(c.Account.OutputTokensPerMinute, inv),
		ReserveOutputTPM: adaptive.Part(c.Account.OutputTokensPerMinute, ic.Reserve*inv),
		Fair:             [classify.NumClasses]bool{ic.Fairness != fairFIFO, bc.Fairness != fairFIFO},
	}
	return c.Classes.withInFlight(l, max(1, c.Account.MaxInFlight/replicas))
}

// withInFlight is l with in-flight bound inFlight, partitioned between
// the classes by their shares: the one derivation of BulkInFlight and
// ReserveInFlight, for max_in_flight and for an adaptive bound alike.
func (c ClassesConfig) withInFlight(l store.Limits, inFlight int64) store.Limits {
	l.InFlight = inFlight
	l.BulkInFlight = adaptive.Part(inFlight, c.Bulk.Share)
	l.ReserveInFlight = adaptive.Part(inFlight, c.Interactive.Reserve)
	return l
}
