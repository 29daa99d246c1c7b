package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds the wait for a new server's first PING answer;
	// redis-server without data to load answers within milliseconds.
	readyTimeout = 10 * time.Second
	// pollInterval is how often PING is retried until then.
	pollInterval = 10 * time.Millisecond
	// probeDialTimeout keeps one PING attempt short against a port that
	// nothing accepts on yet.
	probeDialTimeout = 250 * time.Millisecond
	// waitDelay bounds cmd.Wait after the process is killed. Output goes
	// to a file, not a pipe, so Wait should not need it.
	waitDelay = 5 * time.Second
	// portAttempts is how many free ports Start tries: another process can
	// take a port between our probe listener closing and redis binding it.
	portAttempts = 3
	// logTail is how much of redis.log an error message quotes.
	logTail = 2 << 10
)

// errPortTaken reports that the port picked for a new server was taken by
// another process before redis-server could bind it.
var errPortTaken = errors.New("redistest: port taken by another process")

// process is one run of redis-server.
type process struct {
	proc *os.Process
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read only after done is closed
}

// serverArgs are redis-server's arguments for a throwaway server on
// 127.0.0.1:port: no RDB, no AOF, files in dir, logging to dir/redis.log.
func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	}
}

// startProcess runs bin with args in dir, its output in dir/redis.out. The
// process is SIGKILLed when ctx is done.
func startProcess(ctx context.Context, bin string, args []string, dir string) (*process, error) {
	// Anything redis-server prints before it opens redis.log (a bad
	// argument, say) lands here. A file rather than a pipe: nothing to
	// copy, and nothing held open by the child can stall Wait.
	out, err := os.OpenFile(filepath.Join(dir, "redis.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // G304: a file in the test's own temp dir
	if err != nil {
		return nil, fmt.Errorf("redistest: open output file: %w", err)
	}
	// The child has its own descriptor once started; ours was write-only
	// and unwritten, so closing it cannot lose anything.
	defer func() { _ = out.Close() }()

	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // G204: redis-server from PATH, arguments built here
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	// A throwaway server has nothing to save, so it gets no grace period.
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = sysProcAttr()

	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go p.run(cmd, started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("redistest: run %s: %w", bin, err)
	}
	return p, nil
}

// run starts cmd, reports the outcome on started, and reaps the process.
// It keeps its OS thread for the process's whole life: on Linux the child's
// parent-death signal fires when the thread that forked it exits, and the
// runtime retires a thread whenever a goroutine locked to it exits, which
// any goroutine the thread later ran could do.
func (p *process) run(cmd *exec.Cmd, started chan<- error) {
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		started <- err
		return
	}
	p.proc = cmd.Process
	started <- nil
	p.err = cmd.Wait()
	close(p.done)
	// Returning while locked retires the thread, which is fine: the child
	// is gone.
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL, unless the process has already exited, and waits
// until it has been reaped.
func (p *process) kill() {
	if !p.exited() {
		// The only error is that the process is already done, which the
		// wait below covers.
		_ = p.proc.Kill()
	}
	<-p.done
}

// launch starts redis-server on port and waits until it answers. On
// failure nothing is left running and the error quotes redis.log; it wraps
// errPortTaken when another process holds the port.
func (s *Server) launch(ctx context.Context, port int) (*process, error) {
	opts, err := controlOptions(fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	if err != nil {
		return nil, err
	}
	return launch(s.life, ctx, s.bin, append(serverArgs(port, s.dir), s.args...), s.dir, opts)
}

// launch runs bin with args in dir, bound to life, and waits until the
// server that opts reach answers PING. The process must log to
// dir/redis.log. On failure nothing is left running and the error quotes
// redis.log and redis.out; it wraps errPortTaken when another process holds
// a port the server wanted.
func launch(life, ctx context.Context, bin string, args []string, dir string, opts *redis.Options) (*process, error) {
	logPath := filepath.Join(dir, "redis.log")
	from := fileSize(logPath)
	p, err := startProcess(life, bin, args, dir)
	if err != nil {
		return nil, err
	}
	if err := waitReadyOptions(ctx, opts, p); err != nil {
		p.kill()
		log := readTail(logPath, from)
		if strings.Contains(log, "Address already in use") && !errors.Is(err, errPortTaken) {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		if out := readTail(filepath.Join(dir, "redis.out"), 0); out != "" {
			log += "\nstdout and stderr:\n" + out
		}
		return nil, fmt.Errorf("%s: %w\nredis.log:\n%s", opts.Addr, err, log)
	}
	return p, nil
}

// waitReady polls the server at url with PING every pollInterval until it
// answers, for at most readyTimeout. With p set, the server that answers
// must be p (a server that another test started on the same port is
// errPortTaken), and p exiting ends the wait.
func waitReady(ctx context.Context, url string, p *process) error {
	opts, err := controlOptions(url)
	if err != nil {
		return err
	}
	return waitReadyOptions(ctx, opts, p)
}

// waitReadyOptions is waitReady for a server reached with opts (a TLS
// server, a sentinel).
func waitReadyOptions(ctx context.Context, opts *redis.Options, p *process) error {
	ctx, cancel := context.WithTimeoutCause(ctx, readyTimeout,
		fmt.Errorf("redistest: no PING answer within %s", readyTimeout))
	defer cancel()
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := probe(ctx, opts, p)
		if err == nil || errors.Is(err, errPortTaken) {
			return err
		}
		select {
		case <-exited:
			return fmt.Errorf("redistest: redis-server exited: %w", p.err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}

// probe makes one attempt: dial once, PING and, when p is set, check by
// process_id that the server answering is p. Each attempt has a client of
// its own because go-redis retries failed dials with a backoff and, once
// a pool's dials keep failing, answers from a circuit breaker probed once
// a second: both would slow the poll well past pollInterval.
func probe(ctx context.Context, opts *redis.Options, p *process) error {
	o := *opts
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialTimeout = probeDialTimeout
	o.PoolSize = 2 // one failed dial must not open the circuit breaker
	c := redis.NewClient(&o)
	defer func() { _ = c.Close() }() // a failed close of a one-off probe changes nothing
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(parseInfo(info)["process_id"])
	if err != nil {
		return fmt.Errorf("redistest: INFO server process_id: %w", err)
	}
	if pid != p.proc.Pid {
		return fmt.Errorf("%w: process %d answers, not ours (%d)", errPortTaken, pid, p.proc.Pid)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		_ = l.Close()
		return 0, fmt.Errorf("redistest: listener address %v is not TCP", l.Addr())
	}
	return addr.Port, l.Close()
}

// fileSize returns the size of the file at path, or 0 if it cannot be
// read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readTail returns at most the last logTail bytes written to path after
// offset from, for error messages; it never fails.
func readTail(path string, from int64) string {
	f, err := os.Open(path) //nolint:gosec // G304: a file in the test's own temp dir
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read-only
	if size := fileSize(path); size-from > logTail {
		from = size - logTail
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, logTail))
	if err != nil {
		return fmt.Sprintf("(read %s: %v)\n", path, err)
	}
	return string(b)
}
