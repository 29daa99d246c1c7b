package test

import (
	"testing"

	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestFleetFollowsSentinelFailover: three replicas on a master with one
// replica behind three sentinels; the master is killed with SIGKILL under
// load and the sentinels promote its replica. See testFleetThroughFailover
// for what must hold.
func TestFleetFollowsSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Sentinel of five processes and a failover under load; skipped with -short")
	}
	t.Parallel()
	s := redistest.StartSentinel(t)
	testFleetThroughFailover(t, redisFailover{
		name:     "Redis Sentinel",
		url:      s.URL(),
		kill:     func(t *testing.T) string { return s.KillMaster(t) },
		promoted: func(t *testing.T, old string) string { return s.WaitFailover(t, old) },
	}, redistest.Prefix(t))
}
