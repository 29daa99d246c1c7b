package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/internal/repeatlog"
)

// redisLogEvery is how often, at most, go-redis's messages reach the log
// while they repeat: a pool that cannot dial says so on every attempt,
// four times a second per replica for as long as Redis is down.
const redisLogEvery = time.Minute

// RedisLog routes go-redis's own messages (a pool that fails to dial, a
// cluster re-reading its slots) into the process's structured log, at
// warn as "redis_client", instead of plain text on stderr between the
// JSON lines — and keeps an outage to a line a minute: the first message
// is logged at once, later ones within redisLogEvery of the last line
// are counted, and the next line says how many were left out
// ("suppressed") and is the latest. flush writes what is still counted
// when the outage ends. Safe for concurrent use.
type RedisLog struct {
	log *slog.Logger
	now func() time.Time
	sum repeatlog.Summary
}

// Printf implements go-redis's internal.Logging.
func (r *RedisLog) Printf(ctx context.Context, format string, v ...any) {
	if attrs, ok := r.sum.Take(r.now(), redisLogEvery, slog.String("message", fmt.Sprintf(format, v...))); ok {
		r.log.WarnContext(ctx, "redis_client", attrs...)
	}
}

// Flush logs the messages counted since the last line, if any, and ends
// the run: the next message is logged at once. The store calls it when
// Redis answers again.
func (r *RedisLog) Flush() {
	if attrs, ok := r.sum.Flush(r.now()); ok {
		r.log.Warn("redis_client", attrs...)
	}
}

// RouteRedisLogs sends go-redis's messages to log and returns the route,
// to flush when Redis answers again. go-redis has one logger per process:
// the last Admitter opened decides.
func RouteRedisLogs(log *slog.Logger) *RedisLog {
	r := &RedisLog{log: log, now: time.Now}
	redis.SetLogger(r)
	return r
}
