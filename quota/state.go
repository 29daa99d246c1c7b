package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// State is admission's live numbers, for /admin/state: the account's
// pool at the top level, every pool (the account's as "default") under
// Pools.
type State struct {
	// Store is the store's kind and health.
	Store storeState `json:"store"`
	PoolState
	// Caps are the capped callers' numbers, by caller name.
	Caps map[string]gate.CapState `json:"caps"`
	// Pools are every pool's numbers, by name; the account's is "default",
	// and with several accounts each is named after its account's name and
	// a slash ("chat-project/default"; stateName).
	Pools map[string]PoolState `json:"pools"`
	// Budgets are the spend budgets' current periods, as of the budget
	// gate's last read (at most a store heartbeat old).
	Budgets []gate.BudgetState `json:"budgets"`
	// Accounts are upstream.accounts in order, with the classes each
	// serves and lends to (their pools are in Pools, as
	// "<account>/<pool>"); absent with one account.
	Accounts []accountState `json:"accounts,omitempty"`
}

// accountState is one of upstream.accounts as /admin/state shows it.
type accountState struct {
	Name    string           `json:"name"`
	Serves  []classify.Class `json:"serves"`
	LendsTo []classify.Class `json:"lends_to"`
}

// PoolState is one pool's live numbers.
type PoolState struct {
	// Window is the current second's use, by class (index 0 interactive).
	Window store.WindowUse `json:"window"`
	// InFlight, FleetInFlight and Queued are by class name.
	InFlight      map[string]int64 `json:"in_flight"`
	FleetInFlight map[string]int64 `json:"fleet_in_flight"`
	Queued        map[string]int   `json:"queued"`
	// InFlightLimit is the in-flight bound the store enforces.
	InFlightLimit int64 `json:"in_flight_limit"`
	// UpstreamHoldSeconds is how much longer bulk is held on the upstream's word.
	UpstreamHoldSeconds float64 `json:"upstream_hold_seconds"`
	// Adaptive is the adaptive bound's view; absent without
	// adaptive_in_flight.
	Adaptive *adaptiveState `json:"adaptive,omitempty"`
}

// adaptiveState is a pool's adaptive in-flight bound as /admin/state shows
// it: the bound in force between its floor and ceiling, the controller's
// phase, its last decision and why, and the last measurement it judged.
type adaptiveState struct {
	Bound   int64  `json:"bound"`
	Floor   int64  `json:"floor"`
	Ceiling int64  `json:"ceiling"`
	Phase   string `json:"phase"`
	// LastDecision is the last step's action, its move and its reason.
	LastDecision adaptiveDecision `json:"last_decision"`
	// WorkPerSecond and LatencySecondsPerWork are the last judged
	// measurement (0 before the first).
	WorkPerSecond         float64 `json:"work_per_second"`
	LatencySecondsPerWork float64 `json:"latency_seconds_per_work"`
}

// adaptiveDecision is one step of an adaptive bound: its action, the
// bound before and after, and why.
type adaptiveDecision struct {
	Action string `json:"action"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	Why    string `json:"why"`
}

// storeState is the store part of State.
type storeState struct {
	Mode     string `json:"mode"` // in-process or redis
	Degraded bool   `json:"degraded"`
}
