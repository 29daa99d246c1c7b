package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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

// TestLogTextColourOnlyOnATerminal: log.format text written to a file or a
// buffer carries no colour codes (issue 23: a newcomer's log file was full
// of them); only a terminal gets colour.
func TestLogTextColourOnlyOnATerminal(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "meterproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = file.Close() }()
	var buf bytes.Buffer
	for _, w := range []io.Writer{file, &buf} {
		newLogger(LogConfig{Level: "info", Format: "text"}, w).Warn("store_degraded", slog.String("error", "dial tcp: refused"))
	}
	written, err := os.ReadFile(file.Name())
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"a file": string(written), "a buffer": buf.String()} {
		if !strings.Contains(out, "store_degraded") {
			t.Errorf("nothing logged to %s: %q", name, out)
		}
		if strings.Contains(out, "\x1b[") {
			t.Errorf("colour codes written to %s: %q", name, out)
		}
	}
}
