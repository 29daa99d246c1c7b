package quota

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

// TestRedisLogIsStructured: go-redis's messages come out as JSON log
// records, not plain text.
func TestRedisLogIsStructured(t *testing.T) {
	var buf bytes.Buffer
	redisLog{log: slog.New(slog.NewJSONHandler(&buf, nil))}.Printf(t.Context(), "connection pool: failed to dial after %d attempts", 1)
	var rec struct{ Level, Msg, Message string }
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q (%v)", buf.String(), err)
	}
	if rec.Level != "WARN" || rec.Msg != "redis_client" || rec.Message != "connection pool: failed to dial after 1 attempts" {
		t.Errorf("record %+v", rec)
	}
}
