package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/adaptive"
)

// Limits are the numbers a Store enforces, derived from Config by Limits or
// PerReplica. Rates are per minute and turned into per-second allowances by
// Allowance, so any run of N seconds admits N·rate/60 ± 1. The json tags
// are take.lua's names for them (takeArgs.Limits).
type Limits struct {
	// AccountRPM is the whole account's requests per minute.
	AccountRPM int64 `json:"account_rpm"`
	// BulkRPM is what bulk may always take, per minute.
	BulkRPM int64 `json:"bulk_rpm"`
	// ReserveRPM is what bulk never takes, per minute.
	ReserveRPM int64 `json:"reserve_rpm"`
	// InFlight bounds requests in flight, both classes together.
	InFlight int64 `json:"max_in_flight"`
	// BulkInFlight is the in-flight count bulk may always hold.
	BulkInFlight int64 `json:"bulk_in_flight"`
	// ReserveInFlight is the in-flight count bulk never takes.
	ReserveInFlight int64 `json:"reserve_in_flight"`
	// Borrow lets bulk go beyond its share while no interactive request waits.
	Borrow bool `json:"borrow"`
	// AccountTPM, BulkTPM and ReserveTPM are the token partition, per
	// minute; AccountTPM 0 means tokens are not enforced.
	AccountTPM int64 `json:"account_tpm"`
	BulkTPM    int64 `json:"bulk_tpm"`
	ReserveTPM int64 `json:"reserve_tpm"`
	// OutputTPM is the output-token budget per minute (0: not enforced),
	// and ReserveOutputTPM the part of it bulk never takes.
	OutputTPM        int64 `json:"output_tpm"`
	ReserveOutputTPM int64 `json:"reserve_output_tpm"`
	// Fair says, by class, that the class is shared between its callers
	// (classes.<class>.fairness callers): a shared store then shares each
	// second between the replicas with waiters (take.lua's grantSplit).
	Fair [classify.NumClasses]bool `json:"fair"`
}

// perSecond is the most each class may take in a second, in requests and
// in tokens: the account's allowance for interactive (it takes any free
// capacity); for bulk its share, or all but the reserve when it may
// borrow.
func (l Limits) perSecond() (requests, tokens [classify.NumClasses]float64) {
	const I, B = classify.Interactive, classify.Bulk
	requests[I], tokens[I] = float64(l.AccountRPM)/60, float64(l.AccountTPM)/60
	bulk, bulkTokens := l.BulkRPM, l.BulkTPM
	if l.Borrow {
		bulk, bulkTokens = max(bulk, l.AccountRPM-l.ReserveRPM), max(bulkTokens, l.AccountTPM-l.ReserveTPM)
	}
	requests[B], tokens[B] = float64(bulk)/60, float64(bulkTokens)/60
	return requests, tokens
}

// Limits returns the fleet-wide limits.
func (c Config) Limits() Limits { return c.scaled(1) }

// PerReplica returns the fleet limits divided by account.expected_replicas:
// what one replica enforces on its own (the in-process store, and the local
// fallback when Redis fails).
func (c Config) PerReplica() Limits { return c.scaled(c.Account.ExpectedReplicas) }

func (c Config) scaled(replicas int64) Limits {
	if replicas < 1 {
		replicas = 1
	}
	inv := 1 / float64(replicas)
	ic, bc := c.Classes.Interactive, c.Classes.Bulk
	rpm := c.Account.requestsPerMinute()
	l := Limits{
		AccountRPM:       adaptive.Part(rpm, inv),
		BulkRPM:          adaptive.Part(rpm, bc.Share*inv),
		ReserveRPM:       adaptive.Part(rpm, ic.Reserve*inv),
		Borrow:           bc.Borrow,
		AccountTPM:       adaptive.Part(c.Account.TokensPerMinute, inv),
		BulkTPM:          adaptive.Part(c.Account.TokensPerMinute, bc.Share*inv),
		ReserveTPM:       adaptive.Part(c.Account.TokensPerMinute, ic.Reserve*inv),
		OutputTPM:        adaptive.Part(c.Account.OutputTokensPerMinute, inv),
		ReserveOutputTPM: adaptive.Part(c.Account.OutputTokensPerMinute, ic.Reserve*inv),
		Fair:             [classify.NumClasses]bool{ic.Fairness != FairFIFO, bc.Fairness != FairFIFO},
	}
	return c.Classes.withInFlight(l, max(1, c.Account.MaxInFlight/replicas))
}

// withInFlight is l with in-flight bound inFlight, partitioned between
// the classes by their shares: the one derivation of BulkInFlight and
// ReserveInFlight, for max_in_flight and for an adaptive bound alike.
func (c ClassesConfig) withInFlight(l Limits, inFlight int64) Limits {
	l.InFlight = inFlight
	l.BulkInFlight = adaptive.Part(inFlight, c.Bulk.Share)
	l.ReserveInFlight = adaptive.Part(inFlight, c.Interactive.Reserve)
	return l
}

// Allowance is how many requests second sec (Unix seconds) admits at rpm
// requests per minute: floor((t+1)·r) − floor(t·r) with r = rpm/60, in
// integer arithmetic so that no run of seconds drifts. At 12 rpm it is 1
// every fifth second and 0 otherwise. The pattern repeats every minute, so
// t is taken modulo 60 and no product can overflow.
func Allowance(sec, rpm int64) int64 {
	if rpm <= 0 {
		return 0
	}
	t := sec - floorDiv(sec, 60)*60
	return floorDiv((t+1)*rpm, 60) - floorDiv(t*rpm, 60)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// perSecond is the rate in requests per second of a per-minute figure.
func perSecond(rpm int64) float64 { return float64(rpm) / 60 }
