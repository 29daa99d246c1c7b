package redistest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinel starts a master, its replica and three sentinels, checks
// the URL and MasterAddr against go-redis, kills the master and waits for
// the sentinels to promote the replica, key and all.
func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("five redis-servers and a failover; skipped with -short")
	}
	t.Parallel()
	s := StartSentinel(t)
	opts, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%s): %v", s.URL(), err)
	}
	if opts.MasterName != MasterName || !slices.Equal(opts.SentinelAddrs, s.SentinelAddrs()) {
		t.Errorf("the URL names %q at %v, want %q at %v", opts.MasterName, opts.SentinelAddrs, MasterName, s.SentinelAddrs())
	}
	ctx := t.Context()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The replica has the key before its master dies.
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica to acknowledge", n, err)
	}
	old := s.MasterAddr(t)
	killed := time.Now()
	if got := s.KillMaster(t); got != old {
		t.Errorf("KillMaster killed %s, MasterAddr said %s", got, old)
	}
	if msg := fatalOf(t, func(tb testing.TB) { s.KillMaster(tb) }); !strings.Contains(msg, "not running") {
		t.Errorf("KillMaster before the failover: Fatal message %q, want not running", msg)
	}
	next := s.WaitFailover(t, old)
	t.Logf("the sentinels promoted %s %s after %s was killed", next, time.Since(killed).Round(10*time.Millisecond), old)
	if next == old {
		t.Errorf("WaitFailover = %s, the killed master", next)
	}
	if got := s.MasterAddr(t); got != next {
		t.Errorf("MasterAddr after the failover = %s, want %s", got, next)
	}
	nc := redis.NewClient(&redis.Options{Addr: next})
	defer func() { _ = nc.Close() }()
	if got, err := nc.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET k on the new master = %q, %v; want v, replicated before the kill", got, err)
	}
	// The failover client finds the new master on its own.
	waitGroup(t, "the failover client to write to the new master", func(ctx context.Context) error {
		return c.Set(ctx, "k", "w", 0).Err()
	})
	if got, err := nc.Get(ctx, "k").Result(); err != nil || got != "w" {
		t.Errorf("GET k on the new master after the client's SET = %q, %v; want w", got, err)
	}
}
