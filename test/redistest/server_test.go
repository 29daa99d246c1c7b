package redistest

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestStart(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	s := Start(t)
	if !s.Owned() {
		t.Error("Owned() = false for a server Start ran")
	}
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(s.Addr()) {
		t.Errorf("Addr() = %q, want 127.0.0.1:PORT", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	c := s.Client(t)
	ctx := t.Context()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	for _, tc := range []struct{ param, want string }{
		{"save", ""},
		{"appendonly", "no"},
		{"bind", "127.0.0.1"},
		{"daemonize", "no"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			got, err := c.ConfigGet(ctx, tc.param).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got[tc.param] != tc.want {
				t.Errorf("CONFIG GET %s = %q, want %q", tc.param, got[tc.param], tc.want)
			}
		})
	}
}

func TestStopsAtCleanup(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	var s *Server
	t.Run("owner", func(t *testing.T) {
		s = Start(t)
		s.Restart(t) // a process started later is stopped too
	})
	if !s.current().exited() {
		t.Errorf("redis-server at %s still runs after its test's cleanup", s.Addr())
	}
}

// TestConcurrentServers starts servers from parallel tests and checks that
// each got its own.
func TestConcurrentServers(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	const n = 4
	var (
		mu    sync.Mutex
		addrs []string
	)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				s := Start(t)
				c := s.Client(t)
				// Each server is empty: no other test's key is visible.
				n, err := c.DBSize(t.Context()).Result()
				if err != nil || n != 0 {
					t.Errorf("DBSIZE = %d, %v; want an empty server", n, err)
				}
				if err := c.Set(t.Context(), "owner", i, 0).Err(); err != nil {
					t.Error(err)
				}
				mu.Lock()
				addrs = append(addrs, s.Addr())
				mu.Unlock()
			})
		}
	})
	slices.Sort(addrs)
	if len(slices.Compact(addrs)) != n {
		t.Errorf("servers share addresses: %v", addrs)
	}
}

func TestExternalServer(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	owner := Start(t)
	oc := owner.Client(t)
	ctx := t.Context()
	var key string
	t.Run("shared", func(t *testing.T) {
		t.Setenv("REDIS_URL", owner.URL())
		s := Start(t)
		if s.Owned() {
			t.Error("Owned() = true for the REDIS_URL server")
		}
		if s.Addr() != owner.Addr() || s.URL() != owner.URL() {
			t.Errorf("Addr, URL = %s, %s; want %s, %s", s.Addr(), s.URL(), owner.Addr(), owner.URL())
		}
		key = Prefix(t) + ":k"
		if err := s.Client(t).Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if s.TotalCommands(t) == 0 {
			t.Error("TotalCommands = 0 on a server that ran commands")
		}
	})
	// The shared server outlives the test that used it, keys and all.
	if got, err := oc.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("GET %s after the sharing test = %q, %v; want v", key, got, err)
	}
}

func TestOwnedOnly(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	owner := Start(t)
	t.Setenv("REDIS_URL", owner.URL())
	s := Start(t)
	for _, tc := range []struct {
		op string
		f  func(testing.TB)
	}{
		{"Kill", s.Kill},
		{"Restart", s.Restart},
		{"Pause", func(tb testing.TB) { s.Pause(tb, 1) }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			msg := fatalOf(t, tc.f)
			if !strings.Contains(msg, tc.op+" needs a server the test owns") {
				t.Errorf("%s on a REDIS_URL server: Fatal message %q", tc.op, msg)
			}
		})
	}
	if err := owner.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after refused faults: %v", err)
	}
}

func TestStartWithoutRedisServer(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("PATH", t.TempDir())
	msg := fatalOf(t, func(tb testing.TB) { Start(tb) })
	if !strings.Contains(msg, "apt-get install redis-server") {
		t.Errorf("Start without redis-server: Fatal message %q, want install advice", msg)
	}
}

func TestStartBadRedisURL(t *testing.T) {
	t.Setenv("REDIS_URL", "http://user:secret@localhost/")
	msg := fatalOf(t, func(tb testing.TB) { Start(tb) })
	if msg == "" || strings.Contains(msg, "secret") {
		t.Errorf("Start with a bad REDIS_URL: Fatal message %q, want an error without the password", msg)
	}
}

func TestPrefix(t *testing.T) {
	a, b := Prefix(t), Prefix(t)
	for _, p := range []string{a, b} {
		if !regexp.MustCompile(`^mptest-[0-9a-f]{16}$`).MatchString(p) {
			t.Errorf("Prefix = %q, want mptest- and 16 hex digits", p)
		}
	}
	if a == b {
		t.Errorf("two Prefix calls both returned %q", a)
	}
}

func TestClientClosedAtCleanup(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	s := Start(t)
	var c *redis.Client
	t.Run("user", func(t *testing.T) {
		c = s.Client(t)
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if err := c.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("PING on a client after its test = %v, want %v", err, redis.ErrClosed)
	}
}

// fatalRecorder is a testing.TB whose Fatal and Fatalf record the message
// and end the calling goroutine, as testing.T's do, so that a test can
// check what a helper refuses.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs f on its own goroutine with a fatalRecorder over t and
// returns the Fatal message, or "" if f returned normally.
func fatalOf(t *testing.T, f func(testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}
