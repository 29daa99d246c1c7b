package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestReadPersistence: a real redis-server's persistence, as budgets'
// spend would survive its restart or not (issue 37 item 3): none at all
// and snapshots alone are named with the fix (appendonly yes), appendonly
// yes is no warning, and a Redis that refuses CONFIG GET (managed Redis:
// rename-command, an ACL) is an error, never a guess.
func TestReadPersistence(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string // in Lost's message; nil: no warning
	}{
		{"none", []string{"--appendonly", "no", "--save", ""}, []string{"appendonly no, save \"\"", "$0", "appendonly yes", "--dir"}},
		{"snapshots only", []string{"--appendonly", "no", "--save", "900 1"}, []string{"only RDB snapshots", "since the last snapshot", "appendonly yes", `save "900 1"`}},
		{"append-only", []string{"--appendonly", "yes"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.StartWith(t, c.args...)
			p, err := ReadPersistence(t.Context(), srv.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			lost := p.Lost()
			if c.want == nil {
				if lost != nil {
					t.Fatalf("%+v: %v, want no warning", p, lost)
				}
				return
			}
			if lost == nil {
				t.Fatalf("%+v: no warning", p)
			}
			for _, w := range c.want {
				if !strings.Contains(lost.Error(), w) {
					t.Errorf("warning %q does not say %q", lost, w)
				}
			}
		})
	}
	t.Run("CONFIG renamed", func(t *testing.T) {
		srv := redistest.StartWith(t, "--rename-command", "CONFIG", "")
		if _, err := ReadPersistence(t.Context(), srv.Client(t)); err == nil || !strings.Contains(err.Error(), "CONFIG GET appendonly") {
			t.Fatalf("error %v, want CONFIG GET's refusal", err)
		}
	})
	t.Run("CONFIG denied by ACL", func(t *testing.T) {
		srv := redistest.StartWith(t)
		admin := srv.Client(t)
		if err := admin.Do(t.Context(), "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
			t.Fatal(err)
		}
		app := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "pw"})
		t.Cleanup(func() { _ = app.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := ReadPersistence(ctx, app); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("error %v, want the ACL's NOPERM", err)
		}
	})
}
