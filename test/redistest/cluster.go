package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterMasters is how many masters a Cluster has; each has one
	// replica.
	clusterMasters = 3
	// clusterNodeTimeout is cluster-node-timeout in milliseconds: how long
	// a master may be silent before its replica takes over (with the vote,
	// about twice this). Redis's default is 15 s.
	clusterNodeTimeout = 1000
)

// Cluster is a Redis Cluster of three masters with one replica each: six
// redis-server processes the test owns, on free loopback ports, with no
// persistence, each with its files in a directory of its own under
// t.TempDir(). Its cluster-node-timeout is 1 s, so a replica takes over the
// slots of a master that died within a few seconds. Every process is
// SIGKILLed when the test ends. The methods are safe for concurrent use.
type Cluster struct {
	nodes []*node
}

// StartCluster starts six cluster-enabled redis-servers, joins them with
// redis-cli --cluster create … --cluster-replicas 1, and returns once every
// node reports cluster_state:ok with all six nodes known and every replica
// in sync with its master. REDIS_URL is not used: a cluster is always the
// test's own.
//
// If redis-server or redis-cli is not on PATH it fails the test saying how
// to install them.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := redisServerBin(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli is not on PATH: install it (Debian/Ubuntu: apt-get install redis-tools; "+
			"macOS: brew install redis) (%v)", err)
	}
	c := &Cluster{}
	for range 2 * clusterMasters {
		n, err := startNode(t, bin, nodeSpec{args: clusterNodeArgs, options: plainOptions})
		if err != nil {
			t.Fatalf("redistest: start a cluster node: %v", err)
		}
		c.nodes = append(c.nodes, n)
	}
	logOnFailure(t, c.nodes)

	ctx, cancel := context.WithTimeout(t.Context(), groupTimeout)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, c.Addrs()...), "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput() //nolint:gosec // G204: redis-cli from PATH, arguments built here
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	waitGroup(t, "the cluster to form", c.formed)
	return c
}

// clusterNodeArgs are a throwaway server's arguments with cluster mode on,
// the cluster bus on a free port of its own (rather than port+10000, which
// may be past 65535 or taken), a replica that may always take over however
// long its link to the master has been down, and a master that serves a
// new replica's first sync at once rather than after the 5 s Redis waits
// for more replicas to share it.
func clusterNodeArgs(port int, dir string) ([]string, error) {
	bus, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a free bus port: %w", err)
	}
	return append(serverArgs(port, dir),
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-port", strconv.Itoa(bus),
		"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
		"--cluster-replica-validity-factor", "0",
		"--repl-diskless-sync-delay", "0",
	), nil
}

// plainOptions reach a server at addr without TLS.
func plainOptions(addr string) (*redis.Options, error) {
	return controlOptions("redis://" + addr + "/0")
}

// formed reports why the cluster is not ready yet, or nil: every node must
// say cluster_state:ok, know all six nodes and three masters with slots,
// and have its replication in order (a master one replica, a replica its
// link to the master up).
func (c *Cluster) formed(ctx context.Context) error {
	for _, n := range c.nodes {
		ci, err := n.ctl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.addr, err)
		}
		f := parseInfo(ci)
		want := map[string]string{
			"cluster_state":          "ok",
			"cluster_known_nodes":    strconv.Itoa(2 * clusterMasters),
			"cluster_size":           strconv.Itoa(clusterMasters),
			"cluster_slots_assigned": "16384",
			"cluster_slots_ok":       "16384",
		}
		for k, v := range want {
			if f[k] != v {
				return fmt.Errorf("%s: CLUSTER INFO %s:%s, want %s", n.addr, k, f[k], v)
			}
		}
		if err := replicationReady(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// replicationReady reports whether n's replication is in order: a master
// with one replica connected, or a replica whose link to its master is up.
func replicationReady(ctx context.Context, n *node) error {
	r, err := n.info(ctx, "replication")
	if err != nil {
		return err
	}
	switch r["role"] {
	case "master":
		if r["connected_slaves"] != "1" {
			return fmt.Errorf("%s: master with connected_slaves:%s, want 1", n.addr, r["connected_slaves"])
		}
	case "slave":
		if r["master_link_status"] != "up" {
			return fmt.Errorf("%s: replica of %s:%s with master_link_status:%s", n.addr, r["master_host"], r["master_port"], r["master_link_status"])
		}
	default:
		return fmt.Errorf("%s: role %q", n.addr, r["role"])
	}
	return nil
}

// Addrs returns the six nodes' host:port, in the order they started; the
// cluster's roles say nothing about the order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// URL returns a Redis Cluster URL with every node as a seed, as go-redis's
// ParseClusterURL reads it: redis://HOST:PORT?addr=HOST2:PORT2&addr=….
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.nodes[0].addr)
	for i, n := range c.nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		b.WriteString(sep + "addr=" + n.addr)
	}
	return b.String()
}

// Client returns a new go-redis cluster client seeded with every node,
// closed at t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() {
		if err := cc.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			t.Errorf("redistest: close cluster client: %v", err)
		}
	})
	return cc
}

// MasterFor returns the host:port of the master that serves key's slot, as
// a running node reports it (CLUSTER KEYSLOT, then CLUSTER SLOTS). Keys
// with the same {hash tag} share a slot, so MasterFor("{p}") is the master
// of every {p}:… key.
func (c *Cluster) MasterFor(t testing.TB, key string) string {
	t.Helper()
	running := c.running()
	if len(running) == 0 {
		t.Fatal("redistest: MasterFor: no cluster node is running")
	}
	addr, err := masterFor(t.Context(), running[0], key)
	if err != nil {
		t.Fatalf("redistest: MasterFor: %v", err)
	}
	return addr
}

// masterFor asks n which master serves key's slot.
func masterFor(ctx context.Context, n *node, key string) (string, error) {
	slot, err := n.ctl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER KEYSLOT: %w", n.addr, err)
	}
	// CLUSTER SLOTS, deprecated for CLUSTER SHARDS, is still what go-redis's
	// cluster client routes by, so it is the view that matters here.
	slots, err := n.ctl.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: see above
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER SLOTS: %w", n.addr, err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("%s: slot %d has no master", n.addr, slot)
}

// KillNode SIGKILLs the node at addr, as a crash would, and waits until the
// process is reaped. It fails the test if no node of the cluster has that
// address or the node is not running.
func (c *Cluster) KillNode(t testing.TB, addr string) {
	t.Helper()
	i := slices.IndexFunc(c.nodes, func(n *node) bool { return n.addr == addr })
	if i < 0 {
		t.Fatalf("redistest: KillNode: no cluster node at %s (nodes %v)", addr, c.Addrs())
	}
	if !c.nodes[i].running() {
		t.Fatalf("redistest: KillNode: the cluster node at %s is not running", addr)
	}
	c.nodes[i].kill()
}

// WaitFailover waits until the cluster serves key's slot from a master
// other than old (a node the test killed) and returns that master's
// host:port: every running node must report cluster_state:ok and the same
// new master, and that master must answer ROLE as a master. It fails the
// test if that takes longer than 30 s.
func (c *Cluster) WaitFailover(t testing.TB, key, old string) string {
	t.Helper()
	var addr string
	waitGroup(t, "the cluster to move "+key+"'s slot off "+old, func(ctx context.Context) error {
		var err error
		addr, err = c.agreedMaster(ctx, key)
		if err == nil && addr == old {
			err = fmt.Errorf("the running nodes still name %s the slot's master", old)
		}
		return err
	})
	return addr
}

// agreedMaster returns the master of key's slot if every running node is
// in cluster_state:ok and names it, and it answers as a master.
func (c *Cluster) agreedMaster(ctx context.Context, key string) (string, error) {
	var agreed string
	running := c.running()
	for _, n := range running {
		ci, err := n.ctl.ClusterInfo(ctx).Result()
		if err != nil {
			return "", fmt.Errorf("%s: CLUSTER INFO: %w", n.addr, err)
		}
		if s := parseInfo(ci)["cluster_state"]; s != "ok" {
			return "", fmt.Errorf("%s: cluster_state:%s", n.addr, s)
		}
		addr, err := masterFor(ctx, n, key)
		if err != nil {
			return "", err
		}
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("the nodes disagree on the slot's master: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	i := slices.IndexFunc(running, func(n *node) bool { return n.addr == agreed })
	if i < 0 {
		return "", fmt.Errorf("the slot's master %s is not a running node", agreed)
	}
	r, err := running[i].info(ctx, "replication")
	if err != nil {
		return "", err
	}
	if r["role"] != "master" {
		return "", fmt.Errorf("%s: role %s, not yet master", agreed, r["role"])
	}
	return agreed, nil
}

// running returns the nodes whose process has not exited.
func (c *Cluster) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.running() {
			out = append(out, n)
		}
	}
	return out
}
