package store

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLogIsStructured: go-redis's messages come out as JSON log
// records, not plain text.
func TestRedisLogIsStructured(t *testing.T) {
	var buf bytes.Buffer
	r := &RedisLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), now: time.Now}
	r.Printf(t.Context(), "connection pool: failed to dial after %d attempts", 1)
	var rec struct{ Level, Msg, Message string }
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q (%v)", buf.String(), err)
	}
	if rec.Level != "WARN" || rec.Msg != "redis_client" || rec.Message != "connection pool: failed to dial after 1 attempts" {
		t.Errorf("record %+v", rec)
	}
}

// TestRedisLogOutageIsQuiet: an hour of go-redis failing to dial every
// 250 ms — 14,400 messages, which issue 23 found logged one line each —
// comes out as a line when it starts and one a minute after, each saying
// how many it stands for; the flush when Redis answers writes the rest,
// and the next outage's first message is logged at once.
func TestRedisLogOutageIsQuiet(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	r := &RedisLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), now: func() time.Time { return now }}
	const attempts = 4 * 3600
	for i := range attempts {
		r.Printf(t.Context(), "connection pool: failed to dial after %d attempts: dial tcp: connection refused", i+1)
		now = now.Add(250 * time.Millisecond)
	}
	r.Flush()
	type record struct {
		Msg, Message string
		Suppressed   int
	}
	var recs []record
	for line := range strings.Lines(buf.String()) {
		var rec record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) > 62 {
		t.Errorf("%d lines for an hour's outage; want one at its start and about one a minute", len(recs))
	}
	total := 0
	for i, rec := range recs {
		total += rec.Suppressed
		if i < len(recs)-1 {
			total++ // a line as it happens is one message besides those it stands for; the flush's is not
		}
	}
	if total != attempts {
		t.Errorf("the lines stand for %d messages, want every one of the %d", total, attempts)
	}
	if last := recs[len(recs)-1].Message; !strings.Contains(last, "after 14400 attempts") {
		t.Errorf("the last line says %q; want the latest message", last)
	}
	buf.Reset()
	r.Printf(t.Context(), "connection pool: failed to dial after 1 attempts")
	if strings.Contains(buf.String(), `"suppressed"`) || !strings.Contains(buf.String(), "after 1 attempts") {
		t.Errorf("the next outage's first message was not logged at once: %q", buf.String())
	}
	t.Logf("%d messages over an hour, %d lines", attempts, len(recs))
}
