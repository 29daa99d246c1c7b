package store

import (
	"context"
	"errors"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// PerClass holds one number per class, indexed by classify.Class.
type PerClass [classify.NumClasses]int64

// Store holds the counters admission decisions are made on, per pool: the
// current one-second window and the requests in flight. Each pool's
// limiter calls Take from one goroutine at a time; stores are safe for
// concurrent use across pools.
type Store interface {
	// Take records that this replica holds req.InFlight requests in flight
	// (absolute, by class), then grants up to req.Want admissions per class,
	// interactive first, as the window, the partition, the reserve and the
	// in-flight bound allow, and counts them in flight. One call serves
	// both classes and carries every release since the last: a batch costs
	// one round trip.
	Take(ctx context.Context, req TakeRequest) (TakeResult, error)
}

// ErrStoreUnavailable means the store failed and store.on_error is
// "closed": callers get a 503 instead of unlimited or local admission.
var ErrStoreUnavailable = errors.New("quota: store unavailable")

// TakeRequest asks a Store for admissions.
type TakeRequest struct {
	// Pool is the pool the call is for (pool.go); accountPool for the
	// account.
	Pool string
	// Want is how many requests of each class are waiting.
	Want PerClass
	// InFlight is how many requests of each class this replica has in flight
	// now, not counting what this call grants; its credits (slots granted
	// ahead of demand, package quota's prefetch.go) count as in flight.
	InFlight PerClass
	// Credits is how many of InFlight are credits, by class.
	Credits PerClass
	// Upstream is what the upstream's own headers said since the last call,
	// or nil.
	Upstream *UpstreamReport
	// Waiters are, per class, the waiters to grant, in the order grants go
	// to them: each one's token estimate. When set, Want is its length.
	// Nil when tokens are not enforced: Want alone says how many.
	Waiters [classify.NumClasses][]Queued
	// Corrections are, per class, real usage minus the estimates charged
	// for requests that ended since the last call; added to this window.
	Corrections PerClass
	// Output is the output tokens responses reported since the last call,
	// both classes, for the output budget (Limits.OutputTPM).
	Output int64
	// Limits are what the store enforces in this call; they arrive with
	// every call, never at construction, so a reload takes effect on the
	// next one. A call with zero limits (a flush) grants nothing.
	Limits Limits
	// LocalLimits are a fallback store's per-replica limits (store.on_error
	// local), used in place of Limits while the shared store fails.
	LocalLimits Limits
}

// Queued is one waiter in a TakeRequest.
type Queued struct {
	// Cost is its token estimate (0 when tokens are not enforced).
	Cost int64
}

// UpstreamReport is the freshest account state a replica observed in the
// upstream's responses. Durations are relative, so stores key them on
// their own clock (Redis TIME) and replicas' clocks never matter.
type UpstreamReport struct {
	// Age is how long ago the observation was made.
	Age time.Duration
	// Hold is how long after the observation bulk must be held because the
	// account's remaining allowance was below the interactive reserve;
	// 0 means it was above, which lifts an older hold.
	Hold time.Duration
	// ThrottleFor is how long from now bulk must be held because the
	// upstream answered 429 with a retry hint; fresher observations do not
	// lift it. 0 means none.
	ThrottleFor time.Duration
}

// Blocker says what stopped a Take from granting everything it was asked.
type Blocker uint8

const (
	// NotBlocked means everything asked for was granted.
	NotBlocked Blocker = iota
	// BlockedByWindow means the class's allowance in this second is spent;
	// more is possible after RetryAfter.
	BlockedByWindow
	// BlockedByInFlight means the in-flight bound is reached; more is
	// possible when slots are released.
	BlockedByInFlight
	// BlockedByUpstream means bulk is held because the upstream reported
	// the account below the interactive reserve, or answered 429; more is
	// possible after RetryAfter.
	BlockedByUpstream
	// BlockedByOutput means interactive waits because the output budget
	// is spent; more is possible after RetryAfter. (Bulk held by the
	// output budget is BlockedByUpstream: it is held as on the upstream's
	// word.)
	BlockedByOutput
)

// TakeResult is a Store's answer.
type TakeResult struct {
	// Granted is how many admissions were granted per class, 0..Want.
	Granted PerClass
	// Blocker is, per class, why fewer than Want were granted.
	Blocker [classify.NumClasses]Blocker
	// RetryAfter is when asking again can succeed for a blocked class: the
	// start of the next window, or a polling interval for the in-flight
	// bound. Zero when nothing is blocked.
	RetryAfter time.Duration
	// FleetInFlight is the in-flight count of every replica together, by
	// class, after this call (for a single-replica store, this replica's).
	FleetInFlight PerClass
	// FleetCredits is how many of FleetInFlight are credits, not requests,
	// as the replicas last reported them.
	FleetCredits PerClass
	// UpstreamHold is how much longer bulk is held on the upstream's word
	// or by the output budget; 0 when it is not.
	UpstreamHold time.Duration
	// Window is the current second's use after this call.
	Window WindowUse
	// SecondLeft is what was left of the window's second when the store
	// decided, by the store's clock: grants are charged to that second.
	SecondLeft time.Duration
}

// WindowUse is what each class has used of one second's allowance.
type WindowUse struct {
	// Sec is the window, in Unix seconds of the store's clock.
	Sec int64 `json:"second"`
	// Requests and Tokens are what each class used, by class.
	Requests PerClass `json:"requests"`
	Tokens   PerClass `json:"tokens"`
}
