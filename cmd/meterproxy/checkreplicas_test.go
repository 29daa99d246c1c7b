package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCheckConfigWarnsOfOneReplicaOnRedis: a fleet on Redis left at
// expected_replicas 1 is told what a Redis outage would then allow; one
// that says its replicas is not.
func TestCheckConfigWarnsOfOneReplicaOnRedis(t *testing.T) {
	for _, tt := range []struct {
		replicas string
		warned   bool
	}{{"1", true}, {"3", false}} {
		path := writeConfig(t, "store: {redis_url: \"redis://127.0.0.1:6379\", on_error: local}\n"+
			"account: {requests_per_minute: 600, max_in_flight: 30, expected_replicas: "+tt.replicas+"}\n")
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"check-config", "--config", path}, nil, &out, &errOut); err != nil {
			t.Fatalf("check-config: %v", err)
		}
		got := strings.Contains(out.String(), "warning: account.expected_replicas is 1 with a Redis store and store.on_error: local") &&
			strings.Contains(out.String(), "every replica alone would allow the whole 600 requests/min and 30 in flight")
		if got != tt.warned {
			t.Errorf("expected_replicas %s: warned %v, want %v:\n%s", tt.replicas, got, tt.warned, out.String())
		}
	}
}
