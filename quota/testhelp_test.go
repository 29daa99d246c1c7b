package quota

import (
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/poll"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// newTestRedisStore returns a Redis store on its own key prefix, with a 1 s
// heartbeat and a generous timeout (the race detector slows calls).
func newTestRedisStore(t testing.TB, srv *redistest.Server, prefix string) *store.Redis {
	t.Helper()
	return store.NewRedis(srv.Client(t), store.Config{KeyPrefix: prefix, Timeout: 2 * time.Second, Heartbeat: time.Second})
}

// waitUntil is poll.Until.
func waitUntil(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }
