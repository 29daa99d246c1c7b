package quota

import (
	"context"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// Store holds the counters that admission decisions are made on: the
// current one-second window of each class and the requests in flight. A
// Store must be safe for concurrent use. MemoryStore is the in-process one.
type Store interface {
	// Take grants up to req.Want admissions to req.Class at once, as the
	// window, the partition, the reserve and the in-flight bound allow, and
	// counts them as in flight. It also returns req.Release slots first, so
	// a batch of releases rides on the same call.
	Take(ctx context.Context, req TakeRequest) (TakeResult, error)
	// Release returns in-flight slots, by class.
	Release(ctx context.Context, n [classify.NumClasses]int64) error
}

// TakeRequest asks a Store for admissions.
type TakeRequest struct {
	// Class is the class asking.
	Class classify.Class
	// Want is how many requests of Class are waiting.
	Want int64
	// Release is in-flight slots to return before granting, by class.
	Release [classify.NumClasses]int64
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
)

// TakeResult is a Store's answer.
type TakeResult struct {
	// Granted is how many admissions were granted, 0..Want.
	Granted int64
	// Blocker is why fewer than Want were granted.
	Blocker Blocker
	// RetryAfter is when asking again can succeed: the start of the next
	// window, or a polling interval for the in-flight bound.
	RetryAfter time.Duration
}
