package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlertRulesUnderPromtool: Prometheus's own promtool loads the alert
// rules and runs their unit tests (charts/meterproxy/rules/
// meterproxy-rules.test.yaml): each alert fires when it should, with its
// labels and annotations, and stays quiet when it should not.
func TestAlertRulesUnderPromtool(t *testing.T) {
	t.Parallel()
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		promtool = "promtool"
	}
	if _, err := exec.LookPath(promtool); err != nil {
		t.Fatalf("no promtool (%v): run .ci/ensure-prometheus (make test does) or set PROMTOOL", err)
	}
	dir := filepath.Join("..", "charts", "meterproxy", "rules")
	for _, args := range [][]string{
		{"check", "rules", "meterproxy-rules.yaml"},
		{"test", "rules", "meterproxy-rules.test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...) //nolint:gosec // PROMTOOL is the test runner's own choice; args are the test's
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
