package redistest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestKillRestart(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, tc := range []struct {
		name string
		kill bool
	}{
		{"after Kill", true},
		{"while running", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t)
			addr := s.Addr()
			c := s.Client(t)
			ctx := t.Context()
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.kill {
				s.Kill(t)
				if err := c.Ping(ctx).Err(); err == nil {
					t.Fatal("PING after Kill succeeded")
				}
				if msg := fatalOf(t, s.Kill); !strings.Contains(msg, "not running") {
					t.Errorf("second Kill: Fatal message %q, want not running", msg)
				}
			}
			s.Restart(t)
			if s.Addr() != addr {
				t.Errorf("Addr after Restart = %s, want %s", s.Addr(), addr)
			}
			if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Fatalf("PING after Restart = %q, %v; want PONG", got, err)
			}
			if got, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("GET k after Restart = %q, %v; want nil (keys gone)", got, err)
			}
		})
	}
}

// TestPause checks that a command sent during a pause runs only after it,
// by Redis's own clock: the server ends the pause no earlier than d after
// CLIENT PAUSE arrived, which was after the first TIME.
func TestPause(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	const d = 200 * time.Millisecond
	s := Start(t)
	c := s.Client(t)
	ctx := t.Context()
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	s.Pause(t, d)
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME during a %s pause: %v", d, err)
	}
	// Redis keeps the pause's end in whole milliseconds.
	if ran := after.Sub(before); ran < d-time.Millisecond {
		t.Errorf("TIME during a %s pause ran %s after the TIME before it: the pause did not hold it", d, ran)
	}
}
