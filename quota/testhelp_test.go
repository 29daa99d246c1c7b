package quota

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// newTestRedisStore returns a Redis store on its own key prefix, with a 1 s
// heartbeat and a generous timeout (the race detector slows calls).
func newTestRedisStore(t testing.TB, srv *redistest.Server, prefix string) *store.Redis {
	t.Helper()
	return store.NewRedis(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second, Heartbeat: time.Second})
}

// waitUntil is poll.Until.
func waitUntil(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }

// budgetAfterRefresh is budget's state in a's as of the budget gate's next
// read of its budgets (gate.BudgetRefresh on the bubble's clock; call it
// inside synctest.Test), failing t when a has no such budget.
func budgetAfterRefresh(t *testing.T, a *Admitter, budget string) gate.BudgetState {
	t.Helper()
	time.Sleep(gate.BudgetRefresh) // the budget gate reads its budgets again; the bubble's clock
	synctest.Wait()
	for _, b := range a.State().Budgets {
		if b.Budget == budget {
			return b
		}
	}
	t.Fatalf("no %s budget in the state", budget)
	return gate.BudgetState{}
}
