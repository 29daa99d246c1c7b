// Package repeatlog keeps a message that repeats to a line an interval:
// the first is logged at once, later ones within the interval of the last
// line are counted, and the next line says how many it stands for
// ("suppressed", "over") and carries the latest's attributes.
package repeatlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Summary is one repeating message's state. Its zero value is ready: no
// run of messages is going on. Safe for concurrent use.
type Summary struct {
	mu sync.Mutex
	// logged is when the last line was written; zero: no run is going on.
	logged     time.Time
	suppressed int
	last       []any
}

// Warn logs msg with attrs at warn on log, at now, unless a line was
// written less than every before: then it is counted, and its attrs kept
// for the next line.
func (s *Summary) Warn(ctx context.Context, log *slog.Logger, now time.Time, every time.Duration, msg string, attrs ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.logged.IsZero() && now.Sub(s.logged) < every {
		s.suppressed++
		s.last = attrs
		return
	}
	if s.suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", s.suppressed), slog.Duration("over", now.Sub(s.logged)))
	}
	log.WarnContext(ctx, msg, attrs...)
	s.logged, s.suppressed, s.last = now, 0, nil
}

// Flush logs the messages counted since the last line, if any (with the
// latest's attrs), and ends the run: the next message is logged at once.
func (s *Summary) Flush(log *slog.Logger, now time.Time, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.suppressed > 0 {
		log.Warn(msg, append(s.last, slog.Int("suppressed", s.suppressed), slog.Duration("over", now.Sub(s.logged)))...)
	}
	s.logged, s.suppressed, s.last = time.Time{}, 0, nil
}
