package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogDurationsAsText: durations are logged as "30s", not nanoseconds.
func TestLogDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	newLogger(LogConfig{Level: "info", Format: "json"}, &buf).Info("draining", slog.Duration("grace", 30*time.Second))
	if !strings.Contains(buf.String(), `"grace":"30s"`) {
		t.Errorf("logged %s; want grace as \"30s\"", buf.String())
	}
}
