package proxy

import (
	"context"
	"errors"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// The outcomes of meterproxy_shadow_decisions_total.
const (
	shadowAdmitted   = admitAdmitted          // would have gone at once
	shadowHeld       = admitHeld              // would have waited, then gone
	shadowQueueFull  = reasonQueueFull        // would have been refused at once
	shadowMaxWait    = reasonMaxWait          // would have been refused after max_wait
	shadowCallerCap  = reasonCallerCap        // the caller's own cap would have refused it
	shadowTooLarge   = reasonChargeTooLarge   // charged more tokens than one request may be
	shadowUnfinished = "unfinished"           // shutdown came before the decision
	shadowOther      = reasonStoreUnavailable // the store was unavailable, or a reload removed the pool
	shadowBudget     = reasonBudgetExceeded   // a spend budget would have refused it
	shadowUnpriced   = reasonUnpricedModel    // a spend budget could not have priced it
	shadowUnmetered  = reasonUnmeteredAPI     // a spend budget refuses the request's API
)

// shadowOutcomes name a refusal as meterproxy_refusals_total's reason does.
var shadowOutcomes = []string{shadowAdmitted, shadowHeld, shadowQueueFull, shadowMaxWait, shadowCallerCap, shadowTooLarge, shadowUnfinished, shadowOther,
	shadowBudget, shadowUnpriced, shadowUnmetered}

// shadowOutcome is what admission decided, as
// meterproxy_shadow_decisions_total names it: a refusal by its reason
// (reasonOf), every 503 reason as one.
func shadowOutcome(lease *quota.Lease, err error, class classify.Class) string {
	switch {
	case err == nil && lease.Held():
		return shadowHeld
	case err == nil:
		return shadowAdmitted
	case errors.Is(err, gate.ErrClosed), errors.Is(err, context.Canceled):
		return shadowUnfinished
	}
	if f, decided := reasonOf(err, class, ""); decided {
		return f.reason
	}
	return shadowOther
}
