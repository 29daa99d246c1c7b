package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// nginxHint is how to get nginx when it is missing: the bench skips it and
// reports its targets as not measured.
const nginxHint = "apt-get install nginx-light; make bench runs .ci/ensure-nginx"

// findNginx is the nginx binary: on PATH, or Debian's /usr/sbin/nginx (off
// a user's PATH).
func findNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/nginx"
	if fi, err := os.Stat(debian); err == nil && fi.Mode()&0o111 != 0 {
		return debian, nil
	}
	return "", fmt.Errorf("nginx is not installed: %s", nginxHint)
}

// nginxWorkers is nginx's worker processes: one per core, what
// `worker_processes auto` picks, as the Go proxies' GOMAXPROCS is one per
// core; so each proxy may use every core, and no more.
func nginxWorkers() int { return runtime.NumCPU() }

// nginxConf is the configuration the bench runs nginx with, its files
// under dir: a plain reverse proxy to upstream, as the baseline is.
//   - daemon off, master_process on: a master and its workers in the
//     foreground, stopped with the bench; the CPU figure sums them all.
//   - access_log off: meterproxy's targets run with the access log off.
//   - an upstream block with keepalive idle connections per worker (at
//     least the run's connections), proxy_http_version 1.1 and an empty
//     Connection header, so upstream connections are reused as the Go
//     proxies reuse theirs; keepalive_requests raised on both sides, as
//     net/http sets no limit (nginx closes a connection after 1,000).
//   - proxy_buffering off: streamed answers pass chunk by chunk, as
//     meterproxy's do.
//   - every temporary path under dir, so nginx needs nothing of the
//     system's (/var/lib/nginx).
func nginxConf(dir, listen, upstream string, keepalive int, modules string) (string, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", err
	}
	var temps strings.Builder
	for _, m := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if m != "client_body" && m != "proxy" && strings.Contains(modules, "--without-http_"+m+"_module") {
			continue
		}
		fmt.Fprintf(&temps, "    %s_temp_path %s;\n", m, filepath.Join(dir, m))
	}
	return fmt.Sprintf(`daemon off;
master_process on;
worker_processes %d;
pid %s;
error_log %s warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
%s    keepalive_requests 1000000;
    upstream fake {
        server %s;
        keepalive %d;
        keepalive_requests 1000000;
    }
    server {
        listen %s;
        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`, nginxWorkers(), filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "error.log"), temps.String(),
		u.Host, keepalive, listen), nil
}

// startNginx runs nginx (bin) in front of upstream in a process group of
// its own, whose every process's CPU time is the target's.
func startNginx(ctx context.Context, bin, dir, upstream string, conns int) (*target, string, error) {
	dir = filepath.Join(dir, "nginx")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, "", err
	}
	v, err := exec.CommandContext(ctx, bin, "-V").CombinedOutput() //nolint:gosec // the nginx binary found on this machine
	if err != nil {
		return nil, "", fmt.Errorf("nginx -V: %w\n%s", err, v)
	}
	version, _, _ := strings.Cut(strings.TrimPrefix(string(v), "nginx version: "), "\n")
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	conf, err := nginxConf(dir, addr, upstream, max(64, conns), string(v))
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, "", err
	}
	// -e: the error log before the configuration is read (Debian's default
	// is stderr; a path of the bench's own, so nothing of the system's).
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")) //nolint:gosec // the nginx found, a configuration this program wrote
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop := stopGroup(cmd)
	url := "http://" + addr
	if err := waitHTTP(ctx, url+"/v1/models"); err != nil {
		stop()
		log, _ := os.ReadFile(filepath.Join(dir, "error.log")) //nolint:gosec // the bench's own temporary file
		return nil, "", fmt.Errorf("nginx did not come up: %w\n%s", err, log)
	}
	return &target{name: nginxName, url: url, pid: cmd.Process.Pid, group: true, stop: stop}, version, nil
}

// stopGroup stops nginx's master (SIGTERM, nginx's fast shutdown), and
// kills its whole process group if it has not exited within 5 s.
func stopGroup(cmd *exec.Cmd) func() {
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}
