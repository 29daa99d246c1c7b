package gate

import (
	"context"

	"github.com/meterproxy/meterproxy/quota/store"
)

var _ CapCounter = FailoverCapCounter{}

// FailoverCapCounter is the callers' caps behind the same breaker and
// store.on_error policy as the pools: while Redis fails, caps are
// counted per replica (local), not at all (open), or refuse (closed).
type FailoverCapCounter struct {
	primary, local CapCounter
	f              *store.Failover
}

// NewFailoverCapCounter returns primary behind f's breaker and
// store.on_error policy, with local the per-replica counter.
func NewFailoverCapCounter(primary, local CapCounter, f *store.Failover) FailoverCapCounter {
	return FailoverCapCounter{primary: primary, local: local, f: f}
}

// take implements CapCounter.
func (c FailoverCapCounter) take(ctx context.Context, t capTake) (capAnswer, error) {
	var ans capAnswer
	if done, err := c.f.Call(ctx, func(ctx context.Context) (err error) {
		ans, err = c.primary.take(ctx, t)
		return err
	}); done {
		return ans, err
	}
	switch c.f.Policy() {
	case store.OnErrorOpen:
		return capAnswer{Granted: t.Want, FleetInFlight: t.InFlight + t.Want}, nil
	case store.OnErrorClosed:
		return capAnswer{}, store.ErrStoreUnavailable
	default:
		t.Cap = t.Local
		return c.local.take(ctx, t)
	}
}
