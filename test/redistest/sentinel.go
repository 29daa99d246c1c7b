package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of a [Sentinel] monitor their
// master by.
const MasterName = "mymaster"

// sentinelCount is how many sentinels watch the master; sentinelQuorum of
// them must agree it is down before one of them fails it over.
const (
	sentinelCount  = 3
	sentinelQuorum = 2
)

// Sentinel is a master, one replica and three sentinels watching them,
// all processes the test owns on free loopback ports, with no persistence.
// A sentinel deems the master down after 1 s without an answer
// (down-after-milliseconds 1000), two must agree (quorum 2), and a
// failover that stalls is retried after 6 s (failover-timeout 3000), so a
// killed master's replica is promoted within a few seconds. Every process
// is SIGKILLed when the test ends. The methods are safe for concurrent
// use.
type Sentinel struct {
	data      []*node // the master at start, then its replica
	sentinels []*node
	sc        []*redis.SentinelClient // one per sentinel
}

// StartSentinel starts the master, its replica (--replicaof) and the three
// sentinels (redis-server sentinel.conf --sentinel), and returns once the
// replica is in sync and every sentinel names the master, knows the
// replica and the two other sentinels. REDIS_URL is not used.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := redisServerBin(t)
	s := &Sentinel{}
	master, err := startNode(t, bin, nodeSpec{args: dataNodeArgs(""), options: plainOptions})
	if err != nil {
		t.Fatalf("redistest: start the master: %v", err)
	}
	replica, err := startNode(t, bin, nodeSpec{args: dataNodeArgs(master.addr), options: plainOptions})
	if err != nil {
		t.Fatalf("redistest: start the replica: %v", err)
	}
	s.data = []*node{master, replica}
	for range sentinelCount {
		n, err := startNode(t, bin, nodeSpec{args: sentinelArgs(master.addr), options: plainOptions})
		if err != nil {
			t.Fatalf("redistest: start a sentinel: %v", err)
		}
		opts, err := plainOptions(n.addr)
		if err != nil {
			t.Fatal(err)
		}
		sc := redis.NewSentinelClient(opts)
		t.Cleanup(func() { _ = sc.Close() }) // a sentinel the test killed may fail the close; nothing to do about it
		s.sentinels, s.sc = append(s.sentinels, n), append(s.sc, sc)
	}
	logOnFailure(t, append(slices.Clone(s.data), s.sentinels...))
	waitGroup(t, "the sentinels to watch the master and its replica", s.ready)
	return s
}

// dataNodeArgs are a throwaway server's arguments, a replica of master
// unless it is empty, whose master serves a new replica's first sync at
// once rather than after the 5 s Redis waits for more replicas to share it.
func dataNodeArgs(master string) func(port int, dir string) ([]string, error) {
	return func(port int, dir string) ([]string, error) {
		args := append(serverArgs(port, dir), "--repl-diskless-sync-delay", "0")
		if master != "" {
			host, port, err := net.SplitHostPort(master)
			if err != nil {
				return nil, err
			}
			args = append(args, "--replicaof", host, port)
		}
		return args, nil
	}
}

// sentinelArgs writes a sentinel's config, which the sentinel rewrites as
// it learns, into its directory and returns redis-server's arguments to
// run it.
func sentinelArgs(master string) func(port int, dir string) ([]string, error) {
	return func(port int, dir string) ([]string, error) {
		host, mport, err := net.SplitHostPort(master)
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
logfile %s
sentinel monitor %s %s %s %d
sentinel down-after-milliseconds %[4]s 1000
sentinel failover-timeout %[4]s 3000
sentinel parallel-syncs %[4]s 1
`, port, dir, filepath.Join(dir, "redis.log"), MasterName, host, mport, sentinelQuorum)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel"}, nil
	}
}

// ready reports why the group is not ready yet, or nil.
func (s *Sentinel) ready(ctx context.Context) error {
	for _, n := range s.data {
		if err := replicationReady(ctx, n); err != nil {
			return err
		}
	}
	for i, sc := range s.sc {
		m, err := sc.Master(ctx, MasterName).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", s.sentinels[i].addr, err)
		}
		want := map[string]string{
			"flags":               "master",
			"num-slaves":          "1",
			"num-other-sentinels": fmt.Sprint(sentinelCount - 1),
		}
		for k, v := range want {
			if m[k] != v {
				return fmt.Errorf("sentinel %s: %s is %q, want %q", s.sentinels[i].addr, k, m[k], v)
			}
		}
		if addr := net.JoinHostPort(m["ip"], m["port"]); addr != s.data[0].addr {
			return fmt.Errorf("sentinel %s watches %s, want %s", s.sentinels[i].addr, addr, s.data[0].addr)
		}
	}
	return nil
}

// URL returns the store URL go-redis's ParseFailoverURL reads, with every
// sentinel: redis://SENTINEL1?master_name=mymaster&addr=SENTINEL2&addr=SENTINEL3.
func (s *Sentinel) URL() string {
	u := "redis://" + s.sentinels[0].addr + "?master_name=" + MasterName
	for _, n := range s.sentinels[1:] {
		u += "&addr=" + n.addr
	}
	return u
}

// SentinelAddrs returns the sentinels' host:port.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.addr
	}
	return addrs
}

// Client returns a new go-redis failover client for the master, closed at
// t.Cleanup.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	return closedAtCleanup(t, redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    MasterName,
		SentinelAddrs: s.SentinelAddrs(),
	}))
}

// MasterAddr returns the master's host:port as the first sentinel that
// answers reports it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	var errs []error
	for _, sc := range s.sc {
		a, err := sc.GetMasterAddrByName(t.Context(), MasterName).Result()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1])
		}
		errs = append(errs, err)
	}
	t.Fatalf("redistest: no sentinel names the master: %v", errors.Join(errs...))
	return ""
}

// KillMaster SIGKILLs the server the sentinels name as master, as a crash
// would, waits until the process is reaped and returns its host:port. It
// fails the test if that server is not running.
func (s *Sentinel) KillMaster(t testing.TB) string {
	t.Helper()
	addr := s.MasterAddr(t)
	i := slices.IndexFunc(s.data, func(n *node) bool { return n.addr == addr })
	if i < 0 {
		t.Fatalf("redistest: KillMaster: the sentinels name %s, which is not a server of the group", addr)
	}
	if !s.data[i].running() {
		t.Fatalf("redistest: KillMaster: the master at %s is not running", addr)
	}
	s.data[i].kill()
	return addr
}

// WaitFailover waits until every sentinel that runs names a master other
// than old, the same one, and that server answers as a master; it returns
// its host:port. It fails the test if that takes longer than 30 s.
func (s *Sentinel) WaitFailover(t testing.TB, old string) string {
	t.Helper()
	var addr string
	waitGroup(t, "the sentinels to promote a replica of "+old, func(ctx context.Context) error {
		var err error
		addr, err = s.agreedMaster(ctx)
		if err == nil && addr == old {
			err = fmt.Errorf("the sentinels still name %s", old)
		}
		return err
	})
	return addr
}

// agreedMaster returns the master every running sentinel names, if they
// agree and it answers as a master.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	var agreed string
	for i, sc := range s.sc {
		if !s.sentinels[i].running() {
			continue
		}
		a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		if err != nil || len(a) != 2 {
			return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME: %v %w", s.sentinels[i].addr, a, err)
		}
		addr := net.JoinHostPort(a[0], a[1])
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("the sentinels disagree: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	i := slices.IndexFunc(s.data, func(n *node) bool { return n.addr == agreed })
	if i < 0 || !s.data[i].running() {
		return "", fmt.Errorf("the sentinels name %s, which is not a running server of the group", agreed)
	}
	r, err := s.data[i].info(ctx, "replication")
	if err != nil {
		return "", err
	}
	if r["role"] != "master" {
		return "", fmt.Errorf("%s: role %s, not yet master", agreed, r["role"])
	}
	return agreed, nil
}
