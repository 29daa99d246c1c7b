// Package procs runs meterproxy as a real process for end-to-end tests and
// the demo: it builds the binary, starts it on free ports, learns its
// addresses from its own "serving" log line, keeps every log line, and stops
// it with SIGTERM.
package procs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Version is stamped into binaries Build makes, as `make build` and the
// Dockerfile stamp theirs.
const Version = "e2e-build"

// Build compiles ./cmd/<name> of the module rooted at root into dir, with
// the release flags, and returns the binary's path.
func Build(ctx context.Context, root, dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	// The release build: the flags of `make build` and the Dockerfile.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+Version, "-o", out, "./cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("procs: go build %s: %w\n%s", name, err, b)
	}
	return out, nil
}

// ModuleRoot walks up from the working directory to the go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("procs: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Proxy is a running meterproxy process.
type Proxy struct {
	// URL is the proxy listener, e.g. http://127.0.0.1:41234.
	URL string
	// AdminURL is the admin listener.
	AdminURL string

	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   bytes.Buffer
	exited chan struct{}
	err    error
}

// StartProxy runs bin serve --config configPath with environ, waits until
// it logs that it is serving, and returns it. Listen addresses in the
// config should be 127.0.0.1:0. If the process exits first, the error
// carries its output.
func StartProxy(ctx context.Context, bin, configPath string, environ []string) (*Proxy, error) {
	cmd := exec.Command(bin, "serve", "--config", configPath)
	cmd.Env = environ
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proxy{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan [2]string, 1)
	go p.readLogs(stderr, serving)
	select {
	case addrs := <-serving:
		p.URL, p.AdminURL = "http://"+addrs[0], "http://"+addrs[1]
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("procs: meterproxy exited before serving: %w\n%s", p.err, p.Logs())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("procs: meterproxy did not start: %w\n%s", ctx.Err(), p.Logs())
	}
}

// readLogs keeps every line and reports the listen addresses of the
// "serving" line; it reaps the process at EOF.
func (p *Proxy) readLogs(r io.Reader, serving chan<- [2]string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		p.logs.Write(line)
		p.logs.WriteByte('\n')
		p.mu.Unlock()
		var rec struct {
			Msg         string `json:"msg"`
			Listen      string `json:"listen"`
			AdminListen string `json:"admin_listen"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" {
			serving <- [2]string{rec.Listen, rec.AdminListen}
		}
	}
	p.err = p.cmd.Wait()
	close(p.exited)
}

// Logs returns everything the process has logged so far.
func (p *Proxy) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Signal sends sig to the process.
func (p *Proxy) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process id, for reading its CPU time and memory in /proc.
func (p *Proxy) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Proxy) Exited() <-chan struct{} { return p.exited }

// Wait waits for the process to exit and returns its exit error, or kills
// it after timeout.
func (p *Proxy) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("procs: meterproxy did not exit within %s, killed", timeout)
	}
}

// Stop sends SIGTERM and waits up to timeout for a clean exit.
func (p *Proxy) Stop(timeout time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.Wait(timeout)
}

// LogsContain reports which of secrets appear anywhere in the logs.
func (p *Proxy) LogsContain(secrets ...string) []string {
	logs := p.Logs()
	var found []string
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			found = append(found, s)
		}
	}
	return found
}
