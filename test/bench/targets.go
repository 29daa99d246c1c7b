package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// target is one thing the load is pointed at: a URL and, for a proxy, its
// process (for CPU time and memory) and admin URL (for its metrics). When
// group is set, pid leads a process group and the target's CPU time is
// every process's in it (nginx's master and workers).
type target struct {
	name     string
	url      string
	pid      int
	group    bool
	adminURL string
	stop     func()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// startCmd runs bin with args until stop, and waits until url answers.
func startCmd(ctx context.Context, url, bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...) //nolint:gosec // binaries this program built, arguments it chose
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, url); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s did not come up: %w", bin, err)
	}
	return cmd, nil
}

func stopCmd(cmd *exec.Cmd) func() {
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// waitHTTP polls url until it answers anything.
func waitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			_ = res.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startFake runs cmd/fakeprovider answering at once, streams of 5 chunks
// streamGap apart.
func startFake(ctx context.Context, bin string, streamGap time.Duration) (*target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	url := "http://" + addr
	cmd, err := startCmd(ctx, url+"/v1/models", bin, "-listen", addr, "-latency", "0", "-chunks", "5",
		"-chunk-interval", streamGap.String())
	if err != nil {
		return nil, err
	}
	return &target{name: "direct", url: url, pid: cmd.Process.Pid, stop: stopCmd(cmd)}, nil
}

// startBaseline runs this program again as the baseline proxy.
func startBaseline(ctx context.Context, upstream string) (*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	url := "http://" + addr
	cmd, err := startCmd(ctx, url+"/v1/models", self, "-serve-baseline", addr, "-upstream", upstream)
	if err != nil {
		return nil, err
	}
	return &target{name: "baseline", url: url, pid: cmd.Process.Pid, stop: stopCmd(cmd)}, nil
}

// meterproxyConfig is the benchmark's configuration: an account far above
// the load, so admission never holds and the figures are the proxy's
// cost; one known caller, without a budget. Three model pools stand in
// front of the account, and the benchmark's model (gpt-4o-mini) is the
// last pattern of the last, so every request pays for a whole pool lookup
// — and the prices are laid out alike.
func meterproxyConfig(upstream, redisURL string, extra map[string]any) map[string]any {
	pool := func(name string, match ...string) map[string]any {
		return map[string]any{"name": name, "match": match, "requests_per_minute": 60_000_000, "max_in_flight": 4096}
	}
	cfg := map[string]any{
		"server":   map[string]any{"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0"},
		"upstream": map[string]any{"url": upstream},
		"account": map[string]any{"requests_per_minute": 60_000_000, "max_in_flight": 4096, "models": []map[string]any{
			pool("gpt-4o", "gpt-4o", "gpt-4o-2024-*"),
			pool("reasoning", "o1*", "o3*", "o4-mini*"),
			pool("small", "gpt-4.1-nano*", "gpt-4o-mini*"),
		}},
		"callers": []map[string]any{{"name": "bench", "key_env": "BENCH_KEY", "class": "bulk"}},
		// procs reads the "serving" line; the access log is measured on a
		// target of its own (withAccessLog).
		"log": map[string]any{"level": "info", "format": "json", "access": "off"},
		// Every answer is priced: the benchmark's model matches the last
		// entry, so each pays for a whole price lookup.
		"prices": []map[string]any{
			{"match": []string{"gpt-4o", "gpt-4o-2024-*"}, "input": 2.5, "cached_input": 1.25, "output": 10},
			{"match": []string{"o1*", "o3*", "o4-mini*"}, "input": 1.1, "output": 4.4},
			{"match": []string{"gpt-4.1-nano*", "gpt-4o-mini*"}, "input": 0.15, "cached_input": 0.075, "output": 0.6},
		},
	}
	if redisURL != "" {
		// A generous timeout: the load generator shares the cores, and a
		// call that timed out would switch to local limits and skip Redis.
		cfg["store"] = map[string]any{"redis_url": redisURL, "key_prefix": "bench", "timeout": "1s"}
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// pinAdaptive turns adaptive_in_flight on for cfg's account and every
// pool, with min_in_flight at max_in_flight: the bound cannot move, so a
// run measures what the adaptive bound's measurement costs a request
// (each answer recorded, the counts sent to the store every interval),
// not a bound the controller chose for a load that never nears it.
func pinAdaptive(cfg map[string]any) {
	pin := func(m map[string]any) {
		m["adaptive_in_flight"], m["min_in_flight"] = true, m["max_in_flight"]
	}
	account := cfg["account"].(map[string]any)
	pin(account)
	for _, pool := range account["models"].([]map[string]any) {
		pin(pool)
	}
}

// benchKey is the benchmark caller's key.
const benchKey = "sk-bench-caller-0000000000000000"

// startMeterproxy runs the built meterproxy on cfg.
func startMeterproxy(ctx context.Context, bin, dir, name string, cfg map[string]any) (*target, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	p, err := procs.StartProxy(ctx, bin, path, []string{"BENCH_KEY=" + benchKey})
	if err != nil {
		return nil, err
	}
	return &target{name: name, url: p.URL, pid: p.Pid(), adminURL: p.AdminURL, stop: func() {
		_ = p.Stop(10 * time.Second)
	}}, nil
}

// redisServer is a redis-server this program started, persistence off.
type redisServer struct {
	url    string
	client *redis.Client
	stop   func()
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir) //nolint:gosec // fixed program, chosen port
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server (make bench installs it): %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, errors.New("redis-server did not answer PING")
		}
		time.Sleep(20 * time.Millisecond) // polling a process that has no other signal
	}
	return &redisServer{url: "redis://" + addr + "/0", client: client, stop: func() {
		_ = client.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}}, nil
}

// clientCommands are the commands a client sends; every other command in
// commandstats ran inside a script (Redis counts those too).
var clientCommands = map[string]bool{"evalsha": true, "eval": true, "script|load": true, "script": true, "ping": true}

// commands is how many commands clients sent Redis (round trips: for
// meterproxy, script calls) and how many Redis executed in all, scripts'
// own commands included; INFO itself is left out.
func (r *redisServer) commands(ctx context.Context) (sent, all int64, err error) {
	info, err := r.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range splitLines(info) {
		name, rest, ok := cut(line, "cmdstat_", ":calls=")
		if !ok || name == "info" {
			continue
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("commandstats %q: %w", line, err)
		}
		all += n
		if clientCommands[name] {
			sent += n
		}
	}
	return sent, all, nil
}
