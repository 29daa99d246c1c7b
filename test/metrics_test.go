package test

import (
	"testing"

	"github.com/meterproxy/meterproxy/test/procs"
)

// scrape reads a meterproxy's /metrics or fails the test.
func scrape(t *testing.T, adminURL string) procs.Metrics {
	t.Helper()
	m, err := procs.Scrape(t.Context(), adminURL)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sum is procs.Metrics.Sum.
func sum(m procs.Metrics, name string, labels map[string]string) float64 { return m.Sum(name, labels) }
