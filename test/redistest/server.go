package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Server is a Redis that a test talks to: either a redis-server the test
// owns (started by [Start]) or the external server named by REDIS_URL. Its
// methods are safe for concurrent use, except that Kill and Restart must not
// run concurrently with each other.
type Server struct {
	url   string
	addr  string
	owned bool
	// ctl carries INFO and CLIENT PAUSE. It speaks RESP2 without CLIENT
	// SETINFO, so the only extra command it adds to the server's counts is
	// one HELLO per connection it (re)opens.
	ctl *redis.Client

	// Owned servers only.
	bin  string
	dir  string
	port int
	// args are added to serverArgs' (StartWith).
	args []string
	// life is the context of the test that called Start. Every redis-server
	// process of this Server is bound to it, so a process started by Restart
	// inside a subtest still lives exactly as long as the Server.
	life context.Context

	mu   sync.Mutex
	proc *process // the current (possibly exited) run; guarded by mu
}

// Start returns a Redis for the test. When REDIS_URL is set it uses that
// server (and never flushes it or kills it: tests must use their own key
// prefix, see [Prefix]; [Server.Owned] reports false). Otherwise it starts
// redis-server on a free loopback port with no persistence, its working
// directory and redis.log in t.TempDir(), waits up to 10s until PING
// answers, and kills it at t.Cleanup.
//
// If redis-server is not on PATH and REDIS_URL is unset, Start fails the
// test with a message saying how to install it; it never skips.
func Start(t testing.TB) *Server {
	t.Helper()
	if url := os.Getenv("REDIS_URL"); url != "" {
		return startExternal(t, url)
	}
	return startOwned(t)
}

// startExternal checks that the REDIS_URL server answers and wraps it.
func startExternal(t testing.TB, url string) *Server {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		// The URL itself is not printed: it may carry a password.
		t.Fatalf("redistest: REDIS_URL is not a Redis URL: %v", err)
	}
	s := &Server{url: url, addr: opts.Addr}
	s.ctl = newControlClient(t, url)
	if err := waitReady(t.Context(), url, nil); err != nil {
		t.Fatalf("redistest: the REDIS_URL server at %s does not answer: %v", s.addr, err)
	}
	return s
}

// startOwned runs a redis-server for t on a free port, retrying on a fresh
// port when another process took the one it picked.
func startOwned(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not on PATH and REDIS_URL is unset: "+
			"install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) "+
			"or set REDIS_URL=redis://host:port/db to use a running server (%v)", err)
	}
	s := &Server{owned: true, bin: bin, dir: t.TempDir(), life: t.Context(), args: args}
	// Registered before any process starts; t.Context is cancelled before
	// cleanups run, which already makes os/exec kill the process.
	t.Cleanup(s.stop)
	var errs []error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: pick a free port: %v", err)
		}
		p, err := s.launch(t.Context(), port)
		if err == nil {
			s.port, s.addr = port, fmt.Sprintf("127.0.0.1:%d", port)
			s.url = "redis://" + s.addr + "/0"
			s.setCurrent(p)
			s.ctl = newControlClient(t, s.url)
			return s
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("redistest: start redis-server: %v", errors.Join(errs...))
	return nil
}

// URL returns the server's URL: redis://127.0.0.1:PORT/0 for an owned
// server, REDIS_URL as given (credentials included) otherwise.
func (s *Server) URL() string { return s.url }

// Addr returns the server's host:port, 127.0.0.1:PORT for an owned server.
// It stays the same across [Server.Restart].
func (s *Server) Addr() string { return s.addr }

// Owned reports whether the test started this server, and so may kill,
// restart or pause it. It is false for a REDIS_URL server.
func (s *Server) Owned() bool { return s.owned }

// Client returns a new go-redis client for the server with the options
// [redis.ParseURL] gives its URL, and closes it at t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(s.url)
	if err != nil {
		t.Fatalf("redistest: parse server URL: %v", err)
	}
	return closedAtCleanup(t, redis.NewClient(opts))
}

// Prefix returns a key prefix unique to this call, "mptest-" and 16 hex
// digits, so that tests sharing a server (an external REDIS_URL) never touch
// each other's keys. It logs the prefix to help find leftover keys.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	p := "mptest-" + hex.EncodeToString(b[:])
	t.Logf("redistest: key prefix %s", p)
	return p
}

// newControlClient returns the client behind INFO and CLIENT PAUSE, closed
// at t.Cleanup.
func newControlClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := controlOptions(url)
	if err != nil {
		t.Fatalf("redistest: parse server URL: %v", err)
	}
	return closedAtCleanup(t, redis.NewClient(opts))
}

// controlOptions are the options for our own connections to the server:
// RESP2, no CLIENT SETINFO and no maintenance notifications, so they send as
// few commands as go-redis allows besides the ones asked for.
func controlOptions(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opts, nil
}

func closedAtCleanup(t testing.TB, c *redis.Client) *redis.Client {
	t.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			t.Errorf("redistest: close client: %v", err)
		}
	})
	return c
}

// requireOwned fails the test when s is an external server, which op must
// not disturb.
func (s *Server) requireOwned(t testing.TB, op string) {
	t.Helper()
	if !s.owned {
		t.Fatalf("redistest: %s needs a server the test owns, not the shared REDIS_URL server at %s; "+
			"skip this fault test when Owned() is false", op, s.addr)
	}
}

func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

func (s *Server) setCurrent(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc = p
}

// stop kills the current process, if any, and waits for it to exit.
func (s *Server) stop() {
	if p := s.current(); p != nil {
		p.kill()
	}
}
