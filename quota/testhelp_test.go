package quota

import (
	"io"
	"sync"
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

// lockedBuffer is a log destination safe for the goroutines that log.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

var _ io.Writer = (*lockedBuffer)(nil)

// waitUntil is poll.Until.
func waitUntil(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }
