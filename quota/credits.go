package quota

import (
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// credits are grants the store made ahead of demand (see prefetch.go),
// spent by Admit without a round trip. The store charged them to one
// second's window and counts them in flight, so they are valid until that
// second ends. The zero value holds none. Every field but low is guarded
// by limiter.mu, so the methods that read or change them end in Locked.
type credits struct {
	n     PerClass
	until time.Time
	// gen counts drops: a store call sent before one (a hold, a reload, a
	// failure) must not add credits after it.
	gen uint64
	// low is, per class, the count at which a spend asks the loop to
	// refill; set by the loop without the lock.
	low [classify.NumClasses]atomic.Int64
}

// takeLocked spends one credit of class c, if one is valid at now. It
// reports whether it did, and whether it dropped every credit because
// their second had passed (the store must hear they are back).
func (cr *credits) takeLocked(c classify.Class, now time.Time) (took, dropped bool) {
	if cr.n[c] == 0 {
		return false, false
	}
	if !now.Before(cr.until) {
		return false, cr.dropLocked(classify.Classes[:]...)
	}
	cr.n[c]--
	return true, false
}

// lowLocked reports whether class c's credits are at or below the refill
// mark.
func (cr *credits) lowLocked(c classify.Class) bool { return cr.n[c] <= cr.low[c].Load() }

// dropLocked gives up the credits of classes and starts a new generation;
// it reports whether any were held, so the store hears they are back.
func (cr *credits) dropLocked(classes ...classify.Class) bool {
	cr.gen++
	had := false
	for _, c := range classes {
		had = had || cr.n[c] > 0
		cr.n[c] = 0
	}
	return had
}

// expireLocked drops every credit if their second has passed at now, and
// reports whether it dropped any.
func (cr *credits) expireLocked(now time.Time) bool {
	if cr.n == (PerClass{}) || now.Before(cr.until) {
		return false
	}
	cr.n = PerClass{}
	return true
}

// grantLocked adds n credits of class c, valid until until (or the
// earlier deadline of those already held).
func (cr *credits) grantLocked(c classify.Class, n int64, until time.Time) {
	if cr.n == (PerClass{}) || until.Before(cr.until) {
		cr.until = until
	}
	cr.n[c] += n
}

// deadlineLocked is when the credits expire; zero when there are none.
func (cr *credits) deadlineLocked() time.Time {
	if cr.n == (PerClass{}) {
		return time.Time{}
	}
	return cr.until
}
