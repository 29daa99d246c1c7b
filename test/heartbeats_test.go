//go:build load || faults

package test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// liveReplicas returns the replica ids Redis counts as alive in the fleet
// under prefix (the heartbeat set every replica's store call refreshes).
func liveReplicas(t *testing.T, c *redis.Client, prefix string) map[string]bool {
	t.Helper()
	ids, err := c.ZRange(t.Context(), "{"+prefix+"}:heartbeat", 0, -1).Result()
	if err != nil {
		t.Fatalf("read the replicas' heartbeats: %v", err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}
