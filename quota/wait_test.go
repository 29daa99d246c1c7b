package quota

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
)

// TestWaitSaysWhatHeld checks Lease.Wait and gate.RefusedError.Wait name what
// held a request: the second's window, the in-flight bound, and nothing
// for one admitted at once.
func TestWaitSaysWhatHeld(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Account.RequestsPerMinute = 60 // one a second
			l, _ := testLimiter(t, cfg)
			first, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release()
			if w := first.Wait(); w != (gate.Wait{}) {
				t.Errorf("the first request's Wait = %+v, want none", w)
			}
			second, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			defer second.Release()
			if w := second.Wait(); w.HeldBy != gate.HeldByWindow {
				t.Errorf("the second request's Wait = %+v, want held by %q", w, gate.HeldByWindow)
			}
		})
	})
	t.Run("in flight, then refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := smallConfig()
			cfg.Account.MaxInFlight = 1
			cfg.Classes.Interactive.MaxWait = time.Second
			l, _ := testLimiter(t, cfg)
			first, err := l.Admit(t.Context(), Request{Class: classify.Interactive})
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release()
			_, err = l.Admit(t.Context(), Request{Class: classify.Interactive})
			re, ok := errors.AsType[*gate.RefusedError](err)
			if !ok || !errors.Is(err, gate.ErrWaitTimeout) {
				t.Fatalf("the second request: %v, want a wait timeout", err)
			}
			if re.Wait.HeldBy != gate.HeldByInFlight {
				t.Errorf("the refusal's Wait = %+v, want held by %q", re.Wait, gate.HeldByInFlight)
			}
		})
	})
}
