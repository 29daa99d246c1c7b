package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// groupTimeout bounds each wait on a group of servers (a cluster to form
// or fail over, sentinels to find each other): a few seconds on an idle
// machine, more under the race detector beside other tests.
const groupTimeout = 30 * time.Second

// groupPoll is how often those waits look: each look asks every node.
const groupPoll = 50 * time.Millisecond

// node is one process of a group a test owns (a cluster node, a sentinel,
// a TLS server): started once on a free loopback port, never restarted,
// SIGKILLed by kill or when its test ends.
type node struct {
	addr string
	dir  string
	proc *process
	// ctl asks the node about its state; it reaches only this node.
	ctl *redis.Client
}

// nodeSpec says how to run one node.
type nodeSpec struct {
	// args are the process's arguments for a node listening on port with
	// its files in dir; it must log to dir/redis.log.
	args func(port int, dir string) ([]string, error)
	// options reach the node at addr, for the readiness probe and ctl.
	options func(addr string) (*redis.Options, error)
}

// redisServerBin returns redis-server's path or fails the test saying how
// to install it. Groups always run their own servers: REDIS_URL cannot be a
// cluster, a sentinel group or a TLS server of the test's.
func redisServerBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not on PATH: install it "+
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) (%v)", err)
	}
	return bin
}

// startNode runs one node of spec in a directory of its own under
// t.TempDir(), retrying on a fresh port when another process took the one
// it picked, and waits until it answers PING. The process is bound to
// t.Context() and killed at t.Cleanup.
func startNode(t testing.TB, bin string, spec nodeSpec) (*node, error) {
	t.Helper()
	dir := t.TempDir()
	var errs []error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		args, err := spec.args(port, dir)
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		opts, err := spec.options(addr)
		if err != nil {
			return nil, err
		}
		p, err := launch(t.Context(), t.Context(), bin, args, dir, opts)
		if err == nil {
			n := &node{addr: addr, dir: dir, proc: p, ctl: closedAtCleanup(t, redis.NewClient(opts))}
			t.Cleanup(p.kill)
			return n, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// running reports whether the node's process has not exited.
func (n *node) running() bool { return !n.proc.exited() }

// kill SIGKILLs the node, as a crash would, and waits until it is reaped.
func (n *node) kill() { n.proc.kill() }

// info returns the fields of the node's INFO section.
func (n *node) info(ctx context.Context, section string) (map[string]string, error) {
	s, err := n.ctl.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: INFO %s: %w", n.addr, section, err)
	}
	return parseInfo(s), nil
}

// waitGroup calls check every groupPoll until it returns nil, and fails the
// test naming what it waited for and check's last answer if that takes
// longer than groupTimeout.
func waitGroup(t testing.TB, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), groupTimeout)
	defer cancel()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: %s: not within %s; last: %v", what, groupTimeout, err)
		case <-tick.C:
		}
	}
}

// logOnFailure logs the tail of each node's redis.log at t.Cleanup if the
// test failed. Register it after the nodes started: cleanups run last
// first, so it runs before their directories are removed.
func logOnFailure(t testing.TB, nodes []*node) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("redistest: the group's logs:\n%s", logsOf(nodes))
		}
	})
}

// logsOf returns the tail of each node's redis.log, for a failure message.
func logsOf(nodes []*node) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "--- %s redis.log:\n%s\n", n.addr, readTail(filepath.Join(n.dir, "redis.log"), 0))
	}
	return b.String()
}
