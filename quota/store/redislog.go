package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

	mu sync.Mutex
	// logged is when the last line was written; zero: no run of
	// messages is going on.
	logged     time.Time
	suppressed int
	last       string
}

// Printf implements go-redis's internal.Logging.
func (r *RedisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.logged.IsZero() && now.Sub(r.logged) < redisLogEvery {
		r.suppressed++
		r.last = msg
		return
	}
	attrs := []any{slog.String("message", msg)}
	if r.suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", r.suppressed), slog.Duration("over", now.Sub(r.logged)))
	}
	r.log.WarnContext(ctx, "redis_client", attrs...)
	r.logged, r.suppressed, r.last = now, 0, ""
}

// Flush logs the messages counted since the last line, if any, and ends
// the run: the next message is logged at once. The store calls it when
// Redis answers again.
func (r *RedisLog) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.suppressed > 0 {
		r.log.Warn("redis_client", slog.String("message", r.last), slog.Int("suppressed", r.suppressed),
			slog.Duration("over", r.now().Sub(r.logged)))
	}
	r.logged, r.suppressed, r.last = time.Time{}, 0, ""
}

// RouteRedisLogs sends go-redis's messages to log and returns the route,
// to flush when Redis answers again. go-redis has one logger per process:
// the last Admitter opened decides.
func RouteRedisLogs(log *slog.Logger) *RedisLog {
	r := &RedisLog{log: log, now: time.Now}
	redis.SetLogger(r)
	return r
}
