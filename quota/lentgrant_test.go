package quota

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
)

// TestAccountsLentGrantIsNotLost: bulk waits at its own account and the
// lender at once, in the same order at both, so when a second begins both
// hand their grants to the same oldest waiters. A waiter granted at both
// takes one grant; the other, which the store counted in its window, goes
// to the next waiter there — before, it was cancelled and the window's
// request lost, so the lender lent less than its room while borrowers
// waited (TestAccountsBorrowAndGiveBack's dips on a loaded machine:
// 14 lent a second seen as 5 arrivals and 9 grants thrown away).
func TestAccountsLentGrantIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		cfg.Accounts[0].Account = AccountConfig{RequestsPerMinute: 600, MaxInFlight: 100} // chat: 10 a second, 7 lent
		cfg.Accounts[1].Account = AccountConfig{RequestsPerMinute: 300, MaxInFlight: 100} // batch: 5 a second
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		a := runAdmitter(t, cfg, nil)
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // a second's start
		var mu sync.Mutex
		bySecond := map[int64]int{}
		for range 90 { // more than the four seconds take: waiters left at every grant
			go func() {
				lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk})
				if err != nil {
					return // the test's end
				}
				mu.Lock()
				bySecond[time.Now().Unix()]++
				mu.Unlock()
				lease.Release()
			}()
		}
		start := time.Now().Unix()
		time.Sleep(4*time.Second + time.Second/2)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for sec := start + 1; sec <= start+4; sec++ {
			if n := bySecond[sec]; n != 12 {
				t.Errorf("second %d: %d bulk admitted, want batch's 5 and the 7 chat lends (all seconds: %v)", sec-start, n, bySecond)
			}
		}
	})
}
