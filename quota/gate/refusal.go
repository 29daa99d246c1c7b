package gate

import (
	"errors"
	"fmt"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/price"
)

var (
	// ErrQueueFull means the class's queue already holds max_queue requests.
	ErrQueueFull = errors.New("quota: queue full")
	// ErrWaitTimeout means the request waited max_wait without admission.
	ErrWaitTimeout = errors.New("quota: max wait exceeded")
	// ErrClosed means the limiter has stopped.
	ErrClosed = errors.New("quota: limiter closed")
	// ErrBudgetHeld means the request's worst case fits what its budget
	// has not spent, but not beside what requests in flight hold reserved
	// there, and none of them settled within max_wait.
	ErrBudgetHeld = errors.New("quota: budget held by requests in flight")
)

// RefusedError is a refusal by the limiter: the caller should answer 429
// and may retry after RetryAfter. errors.Is matches its Reason.
type RefusedError struct {
	// Class is the class that was refused.
	Class classify.Class
	// Reason is ErrQueueFull, ErrWaitTimeout or ErrBudgetHeld.
	Reason error
	// RetryAfter estimates when a retry may be admitted; at least a second.
	RetryAfter time.Duration
	// Caller, when set, names the caller whose own cap (callers[].
	// max_in_flight, requests_per_minute) refused the request; empty when
	// the class did.
	Caller string
	// Wait is what the request waited for at its pool before max_wait
	// passed (ErrWaitTimeout); the zero Wait otherwise.
	Wait Wait
}

// Error implements error.
func (e *RefusedError) Error() string {
	if e.Caller != "" {
		return fmt.Sprintf("%v (caller %s's cap, class %s, retry after %s)", e.Reason, e.Caller, e.Class, e.RetryAfter)
	}
	return fmt.Sprintf("%v (class %s, retry after %s)", e.Reason, e.Class, e.RetryAfter)
}

// Unwrap returns the reason.
func (e *RefusedError) Unwrap() error { return e.Reason }

// BudgetExceededError is a refusal by a spend budget (callers[].budget,
// classes.<class>.budget): the request's worst-case cost does not fit what
// the budget has left this period, whatever the requests in flight settle
// to. Retrying before Resets cannot succeed.
type BudgetExceededError struct {
	// Budget names the budget: "caller:<name>" or "class:<class>".
	Budget string
	// Limit and Spent are the budget and what its period spent so far.
	Limit, Spent price.Nanodollars
	// Cost is the request's worst case.
	Cost price.Nanodollars
	// Resets is when the budget's period ends.
	Resets time.Time
}

// Error implements error.
func (e *BudgetExceededError) Error() string {
	return fmt.Sprintf("quota: budget %s exceeded: %s of %s spent, this request may cost up to %s; resets %s",
		e.Budget, e.Spent, e.Limit, e.Cost, e.Resets.UTC().Format(time.RFC3339))
}

// UnpricedModelError is a refusal by a spend budget of a request for a
// model no prices entry matches: the budget cannot price it, and its
// unpriced policy is refuse (the default).
type UnpricedModelError struct {
	// Budget names the budget; Model the request's model ("" when it
	// named none).
	Budget, Model string
}

// Error implements error.
func (e *UnpricedModelError) Error() string {
	if e.Model == "" {
		return fmt.Sprintf("quota: budget %s cannot price a request that names no model", e.Budget)
	}
	return fmt.Sprintf("quota: budget %s cannot price model %q: no prices entry matches it", e.Budget, e.Model)
}

// UnmeteredAPIError is a refusal by a spend budget of a request that may
// cost money on an API whose answers the proxy cannot price (they report
// no token usage it reads): its unpriced_apis policy is refuse (the
// default).
type UnmeteredAPIError struct {
	// Budget names the budget.
	Budget string
}

// Error implements error.
func (e *UnmeteredAPIError) Error() string {
	return fmt.Sprintf("quota: budget %s cannot price this API: its answers report no usage", e.Budget)
}

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
