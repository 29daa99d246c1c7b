package proxy

import (
	"context"
	"errors"
	"time"

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

// shadowAdmit asks admission, beside a request that is forwarded at once
// (mode: shadow), what it would have decided, and records it. The
// decision runs to its end whatever the response does — a request that
// would have waited is recorded admitted after its hold, or refused at
// max_wait, though its real response ended long before — so shadow mode
// counts what enforcement would have: a fast upstream must not hide the
// 429s an operator runs shadow mode to learn about. Call the returned
// func when the response ends. A shadow slot is held as enforcement would
// have held the request's: from its grant for as long as the real
// exchange took, so the counts admission decides on follow the traffic.
// Only a shutdown (the admitter closed) leaves a decision unfinished. The
// real response's priced usage (shadowUsage) is charged to the shadow
// lease's budgets, so that they fill as enforcement's would.
func (h *Handler) shadowAdmit(ctx context.Context, ex *exchange) func() {
	req := ex.request()
	c := req.Class
	start := time.Now()
	type ended struct {
		took  time.Duration
		usage *quota.Usage // the response's, when it was metered
	}
	end := make(chan ended, 1)
	go func() {
		lease, err := h.admitter.Admit(context.WithoutCancel(ctx), req)
		h.m.outcomes.shadow.WithLabelValues(c.String(), shadowOutcome(lease, err, c)).Inc()
		if lease == nil {
			return
		}
		granted := time.Now()
		e := <-end
		if e.usage != nil {
			lease.Settle(quota.Outcome{Usage: e.usage, Shadow: true})
		}
		if rest := time.Until(granted.Add(e.took)); rest > 0 {
			time.AfterFunc(rest, lease.Release)
			return
		}
		lease.Release()
	}()
	return func() { end <- ended{time.Since(start), ex.shadowUsage} }
}

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
