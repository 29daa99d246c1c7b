package redistest

import (
	"testing"
	"time"
)

// Kill SIGKILLs the server and waits for the process to exit, as a crash
// would: clients see their connections reset and new ones refused. It fails
// the test on an external server or one that is not running.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.requireOwned(t, "Kill")
	p := s.current()
	if p.exited() {
		t.Fatalf("redistest: Kill: redis-server at %s is not running (err: %v)", s.addr, p.err)
	}
	p.kill()
}

// Restart starts the server again on the same port and directory — empty
// unless it was started persistent ([StartPersistent]) — and waits until it answers PING; existing clients reconnect to
// it. A server still running is killed first, so Restart alone is a crash
// and recovery. It fails the test on an external server, or if the port has
// been taken by another process meanwhile.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.requireOwned(t, "Restart")
	s.current().kill()
	p, err := s.launch(t.Context(), s.port)
	if err != nil {
		t.Fatalf("redistest: Restart redis-server: %v", err)
	}
	s.setCurrent(p)
}

// Pause sends CLIENT PAUSE d ALL (d rounded up to whole milliseconds) and
// returns once the server has accepted it: for d, every client's commands,
// including Pause's own connection's, wait unanswered, and CLIENT UNPAUSE
// cannot end the pause early since it waits too. go-redis's default
// ReadTimeout is 3s, so with a longer d the waiting commands fail with an
// i/o timeout instead. It fails the test on an external server.
func (s *Server) Pause(t testing.TB, d time.Duration) {
	t.Helper()
	s.requireOwned(t, "Pause")
	if d <= 0 {
		t.Fatalf("redistest: Pause: duration %v is not positive", d)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if err := s.ctl.Do(t.Context(), "CLIENT", "PAUSE", int64(ms), "ALL").Err(); err != nil {
		t.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}
