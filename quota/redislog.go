package quota

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// redisLog routes go-redis's own messages (a pool that fails to dial, a
// cluster re-reading its slots) into the process's structured log, at
// warn as "redis_client", instead of plain text on stderr between the
// JSON lines.
type redisLog struct{ log *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, "redis_client", slog.String("message", fmt.Sprintf(format, v...)))
}

// routeRedisLogs sends go-redis's messages to log. go-redis has one
// logger per process: the last Admitter opened decides.
func routeRedisLogs(log *slog.Logger) { redis.SetLogger(redisLog{log: log}) }
