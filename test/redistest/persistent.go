package redistest

import "testing"

// StartWith starts a redis-server the test owns, as [Start] does without
// REDIS_URL, with args added to its command line (a later argument wins
// over an earlier one: "--appendonly", "yes"). REDIS_URL is not used: the
// arguments are the test's to choose.
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	return startOwned(t, args...)
}

// StartPersistent starts a redis-server the test owns with append-only
// persistence in its directory (appendonly yes, appendfsync always: every
// write is on disk before it is answered), so that [Server.Restart], or a
// [Server.Kill] and a Restart, brings back everything it held.
func StartPersistent(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, "--appendonly", "yes", "--appendfsync", "always")
}
