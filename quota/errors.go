package quota

import (
	"errors"
	"fmt"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

var (
	// ErrQueueFull means the class's queue already holds max_queue requests.
	ErrQueueFull = errors.New("quota: queue full")
	// ErrWaitTimeout means the request waited max_wait without admission.
	ErrWaitTimeout = errors.New("quota: max wait exceeded")
	// ErrClosed means the limiter has stopped.
	ErrClosed = errors.New("quota: limiter closed")
	// ErrPoolRemoved means a reload removed the pool the request waited
	// in: retrying admits it to the pool its model draws on now.
	ErrPoolRemoved = errors.New("quota: the request's pool was removed by a reload")
)

// RefusedError is a refusal by the limiter: the caller should answer 429
// and may retry after RetryAfter. errors.Is matches its Reason.
type RefusedError struct {
	// Class is the class that was refused.
	Class classify.Class
	// Reason is ErrQueueFull or ErrWaitTimeout.
	Reason error
	// RetryAfter estimates when a retry may be admitted; at least a second.
	RetryAfter time.Duration
	// Caller, when set, names the caller whose own cap (callers[].
	// max_in_flight, requests_per_minute) refused the request; empty when
	// the class did.
	Caller string
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
