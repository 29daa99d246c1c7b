// Package repeatlog keeps a message that repeats to a line an interval:
// the first is logged at once, later ones within the interval of the last
// line are counted, and the next line says how many it stands for
// ("suppressed", "over") and carries the latest's attributes.
package repeatlog

import (
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

// Take counts a message with attrs at now and reports whether to log it:
// yes, with the attrs to log (attrs, and "suppressed" and "over" when
// messages were counted since the last line), unless a line was written
// less than every before; then its attrs are kept for the next line. The
// caller logs it under its own static message.
func (s *Summary) Take(now time.Time, every time.Duration, attrs ...any) ([]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.logged.IsZero() && now.Sub(s.logged) < every {
		s.suppressed++
		s.last = attrs
		return nil, false
	}
	if s.suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", s.suppressed), slog.Duration("over", now.Sub(s.logged)))
	}
	s.logged, s.suppressed, s.last = now, 0, nil
	return attrs, true
}

// Flush ends the run, so the next message is logged at once, and reports
// whether messages were counted since the last line: then the attrs of
// the line that stands for them (the latest's, "suppressed" and "over").
func (s *Summary) Flush(now time.Time) ([]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var attrs []any
	if s.suppressed > 0 {
		attrs = append(s.last, slog.Int("suppressed", s.suppressed), slog.Duration("over", now.Sub(s.logged)))
	}
	s.logged, s.suppressed, s.last = time.Time{}, 0, nil
	return attrs, attrs != nil
}
