//go:build faults

package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// The fault suite's processes: the fake provider as a process of its own,
// an upstream that resets every connection, and a watch on a proxy's
// shutdown order.

var fakeBuild struct {
	once sync.Once
	path string
	err  error
}

// fakeproviderBin builds cmd/fakeprovider once, beside the meterproxy binary
// TestMain built (its directory is removed when the tests end).
func fakeproviderBin(t *testing.T) string {
	t.Helper()
	fakeBuild.once.Do(func() {
		root, err := procs.ModuleRoot()
		if err != nil {
			fakeBuild.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		fakeBuild.path, fakeBuild.err = procs.Build(ctx, root, filepath.Dir(meterproxyBin), "fakeprovider")
	})
	if fakeBuild.err != nil {
		t.Fatal(fakeBuild.err)
	}
	return fakeBuild.path
}

// fakeProc is a running cmd/fakeprovider.
type fakeProc struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	logs syncWriter // its stdout and stderr
}

var listeningLine = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startFake runs the fake provider on a free loopback port with args (its
// flags: -latency, -chunks, -chunk-interval, -rpm) and stops it with SIGTERM
// at cleanup, unless the test stopped it first.
func startFake(t *testing.T, args ...string) *fakeProc {
	t.Helper()
	cmd := exec.Command(fakeproviderBin(t), append([]string{"-listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &f.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = fmt.Fprintf(&f.logs, "%s\n", sc.Bytes())
			if m := listeningLine.FindSubmatch(sc.Bytes()); m != nil {
				addr <- string(m[1])
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		f.err = cmd.Wait()
		close(f.done)
	}()
	t.Cleanup(func() { f.stop(t) })
	select {
	case a := <-addr:
		f.URL = "http://" + a
	case <-f.done:
		t.Fatalf("fakeprovider exited before listening: %v\n%s", f.err, f.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("fakeprovider did not start\n%s", f.logs.String())
	}
	return f
}

// stop ends the provider with SIGTERM (its graceful shutdown closes every
// idle connection, so the proxy's upstream pool empties) and waits for it.
func (f *fakeProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
		return
	default:
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.done
		t.Errorf("fakeprovider did not stop within 20 s")
	}
}

// resetter accepts connections, reads a request's headers and answers with
// a TCP reset (SO_LINGER 0), as a crashing upstream or a middlebox would.
type resetter struct {
	URL   string
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	count int
}

func startResetter(t *testing.T) *resetter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &resetter{URL: "http://" + ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns[c] = struct{}{}
			r.mu.Unlock()
			r.wg.Go(func() { r.reset(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		r.mu.Lock()
		for c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// resets returns how many connections the resetter has reset.
func (r *resetter) resets() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

func (r *resetter) reset(c net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.count++
		r.mu.Unlock()
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// shutdownOrder watches a proxy being stopped: every 2 ms it tries a new
// connection to the proxy listener, then asks /readyz. It returns once the
// listener refuses, reporting whether /readyz had answered 503 by then (in
// that round or an earlier one).
func shutdownOrder(proxyURL, adminURL string) (readyFirst bool, err error) {
	addr := strings.TrimPrefix(proxyURL, "http://")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	notReady := false
	for time.Now().Before(deadline) {
		c, derr := net.DialTimeout("tcp", addr, time.Second)
		if derr == nil {
			_ = c.Close()
		}
		if res, err := client.Get(adminURL + "/readyz"); err == nil {
			_ = res.Body.Close()
			notReady = notReady || res.StatusCode == http.StatusServiceUnavailable
		}
		if derr != nil {
			// Refused, or reset when the listener closed with the
			// connection still in its backlog.
			if !isConnRefused(derr) && !errors.Is(derr, syscall.ECONNRESET) {
				return false, derr
			}
			return notReady, nil
		}
		<-tick.C
	}
	return false, errors.New("the listener still accepted connections after 30 s")
}
