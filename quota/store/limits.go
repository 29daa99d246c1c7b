package store

import "github.com/meterproxy/meterproxy/classify"

// Limits are the numbers a Store enforces, derived from package quota's
// Config by its Limits or PerReplica. Rates are per minute and turned into
// per-second allowances by Allowance, so any run of N seconds admits
// N·rate/60 ± 1. The json tags are take.lua's names for them
// (takeArgs.Limits).
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
	// OutputLimits are the output-token budget, embedded: take.lua reads
	// them beside the rest.
	OutputLimits
	// Fair says, by class, that the class is shared between its callers
	// (classes.<class>.fairness callers): a shared store then shares each
	// second between the replicas with waiters (take.lua's grantSplit).
	Fair [classify.NumClasses]bool `json:"fair"`
}

// PerSecond is the most each class may take in a second, in requests and
// in tokens: the account's allowance for interactive (it takes any free
// capacity); for bulk its share, or all but the reserve when it may
// borrow.
func (l Limits) PerSecond() (requests, tokens [classify.NumClasses]float64) {
	const I, B = classify.Interactive, classify.Bulk
	requests[I], tokens[I] = float64(l.AccountRPM)/60, float64(l.AccountTPM)/60
	bulk, bulkTokens := l.BulkRPM, l.BulkTPM
	if l.Borrow {
		bulk, bulkTokens = max(bulk, l.AccountRPM-l.ReserveRPM), max(bulkTokens, l.AccountTPM-l.ReserveTPM)
	}
	requests[B], tokens[B] = float64(bulk)/60, float64(bulkTokens)/60
	return requests, tokens
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

// PerSecond is the rate in requests per second of a per-minute figure.
func PerSecond(rpm int64) float64 { return float64(rpm) / 60 }

// OutputLimits are a pool's output-token budget, in Limits: OutputTPM per
// minute (0: not enforced), and ReserveOutputTPM the part of it bulk
// never takes.
type OutputLimits struct {
	OutputTPM        int64 `json:"output_tpm"`
	ReserveOutputTPM int64 `json:"reserve_output_tpm"`
}
