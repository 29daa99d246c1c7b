//go:build faults

package test

import (
	"testing"

	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/redis/go-redis/v9"
)

// The fault suite's Redis: a server the test owns and what a fleet keeps
// on it.

// fleetRedis is a Redis the test owns, the fleet's key prefix on it, and
// one client to look at the fleet's keys with.
type fleetRedis struct {
	*redistest.Server
	prefix string
	c      *redis.Client
}

// ownedRedis starts a redis-server the test may kill, pause and restart.
// The fault suite needs one of its own: with REDIS_URL set it fails rather
// than skip, since a skipped fault case proves nothing.
func ownedRedis(t *testing.T) *fleetRedis {
	t.Helper()
	srv := redistest.Start(t)
	if !srv.Owned() {
		t.Fatal("the fault suite kills, pauses and restarts Redis: unset REDIS_URL so that it starts redis-server of its own")
	}
	return &fleetRedis{Server: srv, prefix: redistest.Prefix(t), c: srv.Client(t)}
}

// config is a replica's config in the fleet on r, forwarding to upstream,
// logging at debug level: net/http logs handler panics there, and every
// case fails on one.
func (r *fleetRedis) config(upstream string) config {
	c := fleetConfig(upstream, r.Server, r.prefix)
	c.set("log.level", "debug")
	return c
}

// replicaIDs returns the replicas Redis currently counts as alive.
func (r *fleetRedis) replicaIDs(t *testing.T) map[string]bool {
	t.Helper()
	return liveReplicas(t, r.c, r.prefix)
}

// newReplicaID waits until a replica that is not in before shows up in
// Redis's heartbeats and returns its id.
func (r *fleetRedis) newReplicaID(t *testing.T, before map[string]bool) string {
	t.Helper()
	var id string
	waitFor(t, "the new replica's first heartbeat in Redis", func() bool {
		for x := range r.replicaIDs(t) {
			if !before[x] {
				id = x
				return true
			}
		}
		return false
	})
	return id
}

// inFlight returns the fleet's in-flight hash as Redis holds it: totals i
// and b, and each replica's own counts.
func (r *fleetRedis) inFlight(t *testing.T) map[string]string {
	t.Helper()
	m, err := r.c.HGetAll(t.Context(), "{"+r.prefix+"}:inflight").Result()
	if err != nil {
		t.Fatalf("read the fleet's in-flight hash: %v", err)
	}
	return m
}

// waitEmpty waits until Redis counts nothing in flight for the fleet, in
// the account and in every pool of pools (account.models names).
func (r *fleetRedis) waitEmpty(t *testing.T, pools ...string) {
	t.Helper()
	keys := []string{"{" + r.prefix + "}:inflight"}
	for _, p := range pools {
		keys = append(keys, "{"+r.prefix+":pool:"+p+"}:inflight")
	}
	waitFor(t, "Redis's in-flight totals to return to 0", func() bool {
		for _, k := range keys {
			m, err := r.c.HGetAll(t.Context(), k).Result()
			if err != nil {
				t.Fatalf("read %s: %v", k, err)
			}
			if (m["i"] != "" && m["i"] != "0") || (m["b"] != "" && m["b"] != "0") {
				return false
			}
		}
		return true
	})
}
