package quota

import (
	"sync/atomic"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// credits are grants the store made ahead of demand (see prefetch.go),
// spent by Admit without a round trip. The store charged them to one
// second's window and counts them in flight, so they are valid until that
// second ends. The zero value holds none. A waitQueue holds them: every
// field but refillAt is guarded by its mu.
type credits struct {
	n     store.PerClass
	until time.Time
	// gen counts drops: a store call sent before one (a hold, a reload, a
	// failure) must not add credits after it.
	gen uint64
	// refillAt is, per class, the count at which a spend asks the loop to
	// refill; set by the loop without the lock (waitQueue.setRefill).
	refillAt [classify.NumClasses]atomic.Int64
}

// take spends one credit of class c, if one is valid at now. It
// reports whether it did, and whether it dropped every credit because
// their second had passed (the store must hear they are back).
func (cr *credits) take(c classify.Class, now time.Time) (took, dropped bool) {
	if cr.n[c] == 0 {
		return false, false
	}
	if !now.Before(cr.until) {
		return false, cr.drop(classify.Classes[:]...)
	}
	cr.n[c]--
	return true, false
}

// low reports whether class c's credits are at or below the refill
// mark.
func (cr *credits) low(c classify.Class) bool { return cr.n[c] <= cr.refillAt[c].Load() }

// drop gives up the credits of classes and starts a new generation;
// it reports whether any were held, so the store hears they are back.
func (cr *credits) drop(classes ...classify.Class) bool {
	cr.gen++
	had := false
	for _, c := range classes {
		had = had || cr.n[c] > 0
		cr.n[c] = 0
	}
	return had
}

// expire drops every credit if their second has passed at now, and
// reports whether it dropped any.
func (cr *credits) expire(now time.Time) bool {
	if cr.n == (store.PerClass{}) || now.Before(cr.until) {
		return false
	}
	cr.n = store.PerClass{}
	return true
}

// grant adds n credits of class c, valid until until (or the
// earlier deadline of those already held).
func (cr *credits) grant(c classify.Class, n int64, until time.Time) {
	if cr.n == (store.PerClass{}) || until.Before(cr.until) {
		cr.until = until
	}
	cr.n[c] += n
}

// deadline is when the credits expire; zero when there are none.
func (cr *credits) deadline() time.Time {
	if cr.n == (store.PerClass{}) {
		return time.Time{}
	}
	return cr.until
}
