package test

import (
	"testing"

	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestFleetFollowsClusterFailover: three replicas on a Redis Cluster of
// three masters with a replica each; the master of the quota's slot (every
// key is {key_prefix}:…, one slot) is killed with SIGKILL under load and
// its replica takes over. See testFleetThroughFailover for what must hold.
func TestFleetFollowsClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a Redis Cluster of six processes and a failover under load; skipped with -short")
	}
	t.Parallel()
	cl := redistest.StartCluster(t)
	prefix := redistest.Prefix(t)
	tag := "{" + prefix + "}"
	testFleetThroughFailover(t, redisFailover{
		name: "Redis Cluster",
		url:  cl.URL(),
		kill: func(t *testing.T) string {
			old := cl.MasterFor(t, tag)
			cl.KillNode(t, old)
			return old
		},
		promoted: func(t *testing.T, old string) string { return cl.WaitFailover(t, tag, old) },
	}, prefix)
}
