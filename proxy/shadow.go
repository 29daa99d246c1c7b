package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	shadowUnfinished = "unfinished"           // shutdown, or the reload to enforce, came before the decision
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
	if f, decided := reasonOf(err, class, apiName{}); decided {
		return f.reason
	}
	return shadowOther
}

// shadows are the shadow decisions under way (mode: shadow): each asks
// admission, beside a request forwarded at once, what it would have
// decided (quota.Admitter.Simulate), and records it. Their bounds are
// enforcement's — a simulated queue is its class's max_queue, a
// simulated wait ends at its max_wait though no client waits behind it —
// and they hold nothing real: no budget reservation (the forwarded
// request is charged what it spent, settlement.go), and their slots and
// queue places are dropped by the reload to enforce (drop), so nothing
// simulated stands before the first request enforcement admits. Safe for
// concurrent use.
type shadows struct {
	admitter *quota.Admitter
	decided  *prometheus.CounterVec // meterproxy_shadow_decisions_total
	mu       sync.Mutex
	// epoch ends when the decisions under way are dropped; nil while
	// the proxy enforces.
	epoch context.Context
	end   context.CancelFunc
}

// set puts mode shadow on or off: on, decisions are made; off, those
// under way are dropped — their waits end, recorded unfinished, their
// slots are freed — and none is made until it is on again.
func (s *shadows) set(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitter.SetShadow(on)
	switch {
	case on && s.epoch == nil:
		s.epoch, s.end = context.WithCancel(context.Background())
	case !on && s.epoch != nil:
		s.end()
		s.epoch, s.end = nil, nil
	}
}

// current is the epoch a decision starts in; nil while the proxy
// enforces.
func (s *shadows) current() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// decide makes ex's shadow decision. The decision runs to its end
// whatever the response does — a request that would have waited is
// recorded admitted after its hold, or refused at max_wait, though its
// real response ended long before — so shadow mode counts what
// enforcement would have: a fast upstream must not hide the 429s an
// operator runs shadow mode to learn about. Call the returned func when
// the response ends. A shadow slot is held as enforcement would have
// held the request's: from its grant for as long as the real exchange
// took, so the counts admission decides on follow the traffic. Only a
// shutdown (the admitter closed) or the reload to enforce leaves a
// decision unfinished.
func (s *shadows) decide(ctx context.Context, ex *exchange) func() {
	req := ex.request()
	c := req.Class
	epoch := s.current()
	if epoch == nil { // enforcing since ex began: nothing to simulate
		s.decided.WithLabelValues(c.String(), shadowUnfinished).Inc()
		return func() {}
	}
	start := time.Now()
	end := make(chan time.Duration, 1)
	go func() {
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(epoch, cancel)
		defer stop()
		lease, err := s.admitter.Simulate(dctx, req)
		s.decided.WithLabelValues(c.String(), shadowOutcome(lease, err, c)).Inc()
		if lease == nil {
			return
		}
		granted := time.Now()
		var took time.Duration
		select {
		case took = <-end:
		case <-epoch.Done():
			lease.Release()
			return
		}
		rest := time.Until(granted.Add(took))
		if rest <= 0 {
			lease.Release()
			return
		}
		dropped := context.AfterFunc(epoch, lease.Release)
		time.AfterFunc(rest, func() {
			dropped()
			lease.Release()
		})
	}()
	return func() { end <- time.Since(start) }
}
