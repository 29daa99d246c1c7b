package proxy

import (
	"context"
	"errors"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// The outcomes of meterproxy_shadow_decisions_total.
const (
	shadowAdmitted   = admitAdmitted          // would have gone at once
	shadowHeld       = admitHeld              // would have waited, then gone
	shadowQueueFull  = reasonQueueFull        // would have been refused at once
	shadowMaxWait    = reasonMaxWait          // would have been refused after max_wait
	shadowCallerCap  = reasonCallerCap        // the caller's own cap would have refused it
	shadowTooLarge   = reasonChargeTooLarge   // charged more tokens than one request may be
	shadowUnfinished = "unfinished"           // the response ended before the decision
	shadowOther      = reasonStoreUnavailable // the store was unavailable or closing
)

// shadowOutcomes name a refusal as meterproxy_refusals_total's reason does.
var shadowOutcomes = []string{shadowAdmitted, shadowHeld, shadowQueueFull, shadowMaxWait, shadowCallerCap, shadowTooLarge, shadowUnfinished, shadowOther}

// shadowAdmit asks the limiter, beside a request that is forwarded at once
// (mode: shadow), what it would have decided, and records it. The returned
// func, called when the response ends, releases the slot the shadow
// admission took, or abandons its wait, so the limiter's counts follow the
// real traffic.
func (h *Handler) shadowAdmit(ctx context.Context, req quota.Request) func() {
	c := req.Class
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		lease, err := h.admitter.Admit(ctx, req)
		outcome := shadowOutcome(lease, err, c)
		h.m.shadow.WithLabelValues(c.String(), outcome).Inc()
		if lease != nil {
			<-ctx.Done() // hold the slot until the response ends
			lease.Release()
		}
	}()
	return func() {
		cancel()
		<-done
	}
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
	case errors.Is(err, context.Canceled):
		return shadowUnfinished
	}
	if f, decided := reasonOf(err, class); decided {
		return f.reason
	}
	return shadowOther
}
