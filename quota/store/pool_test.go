package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// runPoolConformance: every pool is an account of its own in one store —
// a window spent, slots held or bulk held on the upstream's word in one
// pool leave another untouched.
func runPoolConformance(t *testing.T, newStore newStoreFunc) {
	base := time.Unix(1_700_000_000, 0)
	now := base
	s := newStore(t, windowLimits, func() time.Time { return now })
	take := func(pool string, want PerClass, up *UpstreamReport) TakeResult {
		t.Helper()
		res, err := s.Take(context.Background(), TakeRequest{Pool: pool, Want: want, Upstream: up, Limits: windowLimits})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := take(AccountPool, pc(10, 0), &UpstreamReport{Hold: 5 * time.Second}); r.Granted != pc(10, 0) || r.UpstreamHold == 0 {
		t.Fatalf("account: granted %v, hold %s; want the whole window, bulk held", r.Granted, r.UpstreamHold)
	}
	now = base.Add(10 * time.Millisecond)
	if r := take("gpt-4o", pc(3, 4), nil); r.Granted != pc(3, 4) || r.UpstreamHold != 0 || r.FleetInFlight != pc(3, 4) {
		t.Fatalf("another pool: granted %v, hold %s, fleet %v; want its own full window, no hold, its own count",
			r.Granted, r.UpstreamHold, r.FleetInFlight)
	}
	if r := take(AccountPool, pc(1, 1), nil); r.Granted != pc(0, 0) || r.Blocker != [2]Blocker{bw, BlockedByUpstream} {
		t.Fatalf("account again: granted %v blocked %v; want its window spent and bulk held", r.Granted, r.Blocker)
	}
}

// TestRedisPoolKeys: each pool has keys of its own, in a hash slot of its
// own; the account keeps {key_prefix}.
func TestRedisPoolKeys(t *testing.T) {
	prefix := "meterproxy"
	s := NewRedis(nil, Config{KeyPrefix: prefix, Timeout: time.Second, Heartbeat: time.Second})
	account, other := s.Keys(AccountPool), s.Keys("gpt-4o")
	if !strings.HasPrefix(account[0], "{"+prefix+"}:") || !strings.HasPrefix(other[0], "{"+prefix+":pool:gpt-4o}:") {
		t.Fatalf("keys %v and %v", account, other)
	}
	for _, k := range other {
		if slices.Contains(account, k) {
			t.Fatalf("pools share key %s", k)
		}
	}
}
