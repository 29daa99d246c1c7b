package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogAccessValidated(t *testing.T) {
	dir := t.TempDir()
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dest string
		ok   bool
	}{
		{"stdout", true}, {"stderr", true}, {"off", true},
		{filepath.Join(dir, "access.log"), true},
		{"", false},
		{dir, false},
		{filepath.Join(dir, "missing", "access.log"), false},
		{filepath.Join(readOnly, "access.log"), os.Getuid() == 0}, // root writes anywhere
	} {
		cfg := defaultConfig()
		cfg.Log.Access = tt.dest
		err := cfg.validate(func(string) string { return "" })
		if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), "log.access") {
			t.Errorf("log.access %q: %v, want ok %v (an error naming the key)", tt.dest, err, tt.ok)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "access.log")); !os.IsNotExist(err) {
		t.Errorf("validating created the file: %v", err)
	}
}
