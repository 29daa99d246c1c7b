package quota

import (
	"testing"
	"testing/synctest"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// TestAdmitPicksThePool: quota alone picks the pool a request draws on,
// from its model, at whichever account admits it — the one account of a
// configuration without upstream.accounts as well as each of several —
// and Unheld the same. The proxy asks (PoolAt) for its labels before
// admission, and reads where the request went from the Lease; it never
// tells quota the pool. Before, the one account drew on whatever pool
// the proxy named, and each of several accounts on the one its model
// matched there: two owners of one rule.
func TestAdmitPicksThePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		one := smallConfig()
		one.Account.Models = []modelPool{{Name: "gpt-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 60, MaxInFlight: 10}}
		several := twoAccounts()
		several.Accounts[0].Account.Models = []modelPool{{Name: "chat-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 600, MaxInFlight: 10}}
		several.Accounts[1].Account.Models = []modelPool{{Name: "batch-4o", Match: []string{"gpt-4o*"}, RequestsPerMinute: 600, MaxInFlight: 10}}
		for _, tt := range []struct {
			name     string
			cfg      Config
			class    classify.Class
			model    string
			at, pool string
		}{
			{"one account, a pool's model", one, classify.Interactive, "gpt-4o-mini", "", "gpt-4o"},
			{"one account, no pool's model", one, classify.Interactive, "claude", "", store.AccountPool},
			{"several, interactive", several, classify.Interactive, "gpt-4o", "chat", "chat-4o"},
			{"several, bulk", several, classify.Bulk, "gpt-4o", "batch", "batch-4o"},
			{"several, no pool's model", several, classify.Bulk, "o3", "batch", store.AccountPool},
		} {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			a := runAdmitter(t, tt.cfg, nil)
			req := Request{Class: tt.class, Model: Model{Name: tt.model}, Account: tt.at}
			if got := a.PoolAt(tt.at, func() Model { return req.Model }); got != tt.pool {
				t.Errorf("%s: PoolAt = %q, want %q", tt.name, got, tt.pool)
			}
			lease, err := a.Admit(t.Context(), req)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if lease.Account() != tt.at || lease.Pool() != tt.pool {
				t.Errorf("%s: admitted at %q/%q, want %q/%q", tt.name, lease.Account(), lease.Pool(), tt.at, tt.pool)
			}
			lease.Release()
			unheld := a.Unheld(req)
			if unheld.Pool() != tt.pool {
				t.Errorf("%s: Unheld drew on %q, want %q", tt.name, unheld.Pool(), tt.pool)
			}
			unheld.Release()
		}
	})
}
