package quota

import (
	"testing"

	"github.com/meterproxy/meterproxy/quota/store"
)

func TestLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Account.RequestsPerMinute = 10000
	cfg.Account.MaxInFlight = 200
	cfg.Account.ExpectedReplicas = 4
	fleet, local := cfg.Limits(), cfg.PerReplica()
	want := store.Limits{AccountRPM: 10000, BulkRPM: 2000, ReserveRPM: 3000, InFlight: 200, BulkInFlight: 40, ReserveInFlight: 60, Borrow: true, Fair: [2]bool{true, true}}
	if fleet != want {
		t.Errorf("fleet limits = %+v, want %+v", fleet, want)
	}
	want = store.Limits{AccountRPM: 2500, BulkRPM: 500, ReserveRPM: 750, InFlight: 50, BulkInFlight: 10, ReserveInFlight: 15, Borrow: true, Fair: [2]bool{true, true}}
	if local != want {
		t.Errorf("per-replica limits = %+v, want %+v", local, want)
	}
}
