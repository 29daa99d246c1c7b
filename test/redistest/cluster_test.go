package redistest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCluster starts a cluster, checks that its URL and MasterFor agree with
// go-redis, kills the master of a key's slot and waits for its replica to
// take over with the key.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("six redis-servers and a failover; skipped with -short")
	}
	t.Parallel()
	c := StartCluster(t)
	opts, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatalf("ParseClusterURL(%s): %v", c.URL(), err)
	}
	if !slices.Equal(opts.Addrs, c.Addrs()) {
		t.Errorf("the URL's seeds %v, want every node %v", opts.Addrs, c.Addrs())
	}
	ctx := t.Context()
	cc := c.Client(t)
	const key = "{tag}:k"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.MasterFor(t, "{tag}")
	mc, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if mc.Options().Addr != old {
		t.Errorf("MasterFor = %s, go-redis routes %s to %s", old, key, mc.Options().Addr)
	}
	// The replica has the key before its master dies.
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the master = %d, %v; want its replica to acknowledge", n, err)
	}

	killed := time.Now()
	c.KillNode(t, old)
	if msg := fatalOf(t, func(tb testing.TB) { c.KillNode(tb, old) }); !strings.Contains(msg, "not running") {
		t.Errorf("second KillNode: Fatal message %q, want not running", msg)
	}
	next := c.WaitFailover(t, key, old)
	t.Logf("%s took over %s's slots %s after kill -9", next, old, time.Since(killed).Round(10*time.Millisecond))
	if next == old || !slices.Contains(c.Addrs(), next) {
		t.Errorf("WaitFailover = %s, want another node of %v", next, c.Addrs())
	}
	if got := c.MasterFor(t, key); got != next {
		t.Errorf("MasterFor after the failover = %s, want %s", got, next)
	}
	nc := redis.NewClient(&redis.Options{Addr: next})
	defer func() { _ = nc.Close() }()
	if got, err := nc.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("GET %s on the new master = %q, %v; want v, replicated before the kill", key, got, err)
	}
}

func TestClusterKillUnknownNode(t *testing.T) {
	c := &Cluster{}
	if msg := fatalOf(t, func(tb testing.TB) { c.KillNode(tb, "127.0.0.1:1") }); !strings.Contains(msg, "no cluster node") {
		t.Errorf("KillNode of an unknown address: Fatal message %q", msg)
	}
}
