package quota

import (
	"fmt"
	"testing"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestLimiterOverRedis runs the limiter behaviour tests over the Redis
// store: one caller served in arrival order (FIFO), max_wait, max_queue,
// disconnect, in-flight release.
func TestLimiterOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, prefetch := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) {
			runLimiterSuite(t, func(t *testing.T, _ Config) store.Store {
				return newTestRedisStore(t, srv, redistest.Prefix(t))
			}, prefetch)
		})
	}
}
