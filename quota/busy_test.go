package quota

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// TestBusyIsTheGrantRule: a route is busy for a class exactly when the
// partition rule store.GrantAll applies (docs/rules.md's shares, borrowing and
// reserve) would grant one more request of that class nothing, in the
// state the store last reported: window use, the fleet's in flight, and
// interactive starved (short in this second or the last, which stops bulk
// borrowing fleet-wide). Over a lender (interactive served, bulk lent)
// and an account serving both, every state of a small grid. busy once
// re-derived the rule: it let bulk borrow while interactive was starved,
// and bounded a borrower by bulk's own in flight, not by what both
// classes hold — so 5 interactive and 2 borrowed of 10 with a reserve of
// 3 looked free to bulk, whom the store would not grant.
func TestBusyIsTheGrantRule(t *testing.T) {
	const sec = 1_700_000_000
	const I, B = classify.Interactive, classify.Bulk
	lender := DefaultConfig()
	lender.Account = AccountConfig{RequestsPerMinute: 600, MaxInFlight: 10, ExpectedReplicas: 1}
	lender.Accounts = []Account{{Name: "chat", Account: lender.Account, Serves: []classify.Class{I}, LendsTo: []classify.Class{B}}}
	both := DefaultConfig()
	both.Account = AccountConfig{RequestsPerMinute: 600, MaxInFlight: 10, ExpectedReplicas: 1}
	for name, cfg := range map[string]Config{"lender": lender.ForAccount("chat"), "both": both} {
		lim := cfg.Enforced()
		l := newLimiter(cfg, lim, store.NewMemory(nil), 0, slog.New(slog.DiscardHandler))
		for usedI := range int64(11) {
			for usedB := range int64(11 - usedI) {
				for infI := range int64(11) {
					for infB := range int64(11 - infI) {
						for _, starved := range []bool{false, true} {
							used, inFlight := store.PerClass{I: usedI, B: usedB}, store.PerClass{I: infI, B: infB}
							res := store.TakeResult{Window: store.WindowUse{Sec: sec, Requests: used}, FleetInFlight: inFlight}
							if starved {
								res.Blocker[I] = store.BlockedByInFlight
							}
							l.loop.last.set(store.TakeRequest{}, res)
							state := fmt.Sprintf("%s: used %v, in flight %v, interactive starved %v", name, used, inFlight, starved)
							for _, c := range []classify.Class{I, B} {
								if c == I && starved {
									continue // blocked this second: busy whatever the rooms
								}
								w := store.Window{Sec: sec, Used: used}
								f := inFlight
								var want store.PerClass
								want[c] = 1
								granted, _ := store.GrantAll(lim, sec, store.TakeRequest{Want: want}, [classify.NumClasses]bool{},
									func(bool) bool { return !starved }, &w, &f)
								if got, grants := l.busy(c, sec), granted[c] == 1; got == grants {
									t.Fatalf("%s: busy(%s) = %v, yet the store would grant one more: %v", state, c, got, grants)
								}
							}
						}
					}
				}
			}
		}
	}
}
